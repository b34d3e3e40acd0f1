package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func mustMultiLock(t testing.TB, locks ...Locker) *MultiLock {
	t.Helper()
	m, err := NewMultiLock(locks...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// threeMutexes returns Mutexes name:a, name:b and name:c on c.
func threeMutexes(t testing.TB, c *Client, name string, opts ...LockOption) (a, b, cc *Mutex) {
	t.Helper()
	return mustMutex(t, c, name+":a", opts...), mustMutex(t, c, name+":b", opts...), mustMutex(t, c, name+":c", opts...)
}

func isLocked(t testing.TB, l interface {
	IsLocked(context.Context) (bool, error)
}) bool {
	t.Helper()
	locked, err := l.IsLocked(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return locked
}

func TestMultiLockTryLockAllOrNothing(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	a, b, cc := threeMutexes(t, c, lockName(t))
	held := mustLock(t, ctx, b) // another owner
	m := mustMultiLock(t, cc, b, a)

	_, err := m.TryLock(ctx)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with a member held elsewhere: %v, want ErrNotObtained", err)
	}
	if isLocked(t, a) || isLocked(t, cc) {
		t.Fatal("TryLock kept members after failing")
	}

	if err := b.Unlock(held); err != nil {
		t.Fatal(err)
	}
	lockCtx, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !isLocked(t, a) || !isLocked(t, b) || !isLocked(t, cc) {
		t.Fatal("TryLock succeeded but not every member is locked")
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if isLocked(t, a) || isLocked(t, b) || isLocked(t, cc) {
		t.Fatal("Unlock left members locked")
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, ErrUnlocked) {
		t.Fatalf("lock context cause after Unlock: %v, want ErrUnlocked", cause)
	}
	if err := m.Unlock(lockCtx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
}

func TestMultiLockWaitGivesUpEverything(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	a, b, _ := threeMutexes(t, c, lockName(t))
	held := mustLock(t, ctx, b)
	m := mustMultiLock(t, a, b)
	m.memberWait = 50 * time.Millisecond

	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := m.Lock(wctx)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if isLocked(t, a) {
		t.Fatal("Lock kept a member after its ctx ended")
	}
	if err := b.Unlock(held); err != nil {
		t.Fatal(err)
	}
}

// TestMultiLockReleasesBetweenRounds shows that a waiting MultiLock does not
// sit on the members it has: another owner gets one of them meanwhile.
func TestMultiLockReleasesBetweenRounds(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	a, b, _ := threeMutexes(t, c, lockName(t))
	heldB := mustLock(t, ctx, b)
	m := mustMultiLock(t, a, b)
	m.memberWait = 100 * time.Millisecond

	type result struct {
		ctx context.Context
		err error
	}
	done := make(chan result, 1)
	go func() {
		lctx, err := m.Lock(ctx)
		done <- result{lctx, err}
	}()
	eventually(t, 5*time.Second, func() error {
		if !isLocked(t, a) {
			return errors.New("the MultiLock has not taken its first member yet")
		}
		return nil
	})
	// a is free between rounds; another owner waiting for it gets it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	heldA, err := a.Lock(wctx)
	if err != nil {
		t.Fatalf("another owner never got a member the MultiLock waits with: %v", err)
	}
	if err := b.Unlock(heldB); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(heldA); err != nil {
		t.Fatal(err)
	}
	r := recv(t, done, 10*time.Second, "the MultiLock's Lock")
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	if err := m.Unlock(r.ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMultiLockOrderPreventsDeadlock(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c1, c2 := newClient(t, nil), newClient(t, nil)
	a1, b1, _ := threeMutexes(t, c1, name)
	a2, b2, _ := threeMutexes(t, c2, name)
	m1 := mustMultiLock(t, a1, b1)
	m2 := mustMultiLock(t, b2, a2) // the opposite order
	if m1.Name() != m2.Name() {
		t.Fatalf("lock orders differ: %q and %q", m1.Name(), m2.Name())
	}
	// Without a fixed order, each would hold one member and wait for the
	// other forever: no giving up between rounds here.
	m1.memberWait, m2.memberWait = time.Hour, time.Hour

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, m := range []*MultiLock{m1, m2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				lockCtx, err := m.Lock(wctx)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if err := m.Unlock(lockCtx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMultiLockLostMemberCancelsContext(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil, WithWatchdogTimeout(300*time.Millisecond))
	a, b, _ := threeMutexes(t, c, lockName(t))
	m := mustMultiLock(t, a, b)
	lockCtx := mustLock(t, ctx, m)

	if _, err := b.ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lockCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the MultiLock's context outlived a lost member")
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := m.Unlock(lockCtx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock with a lost member: %v, want ErrNotHeld", err)
	}
	if isLocked(t, a) {
		t.Fatal("Unlock left the surviving member locked")
	}
}

func TestMultiLockReentrant(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	a, b, _ := threeMutexes(t, c, lockName(t))
	m := mustMultiLock(t, a, b, a) // a twice: taken twice

	outerA := mustLock(t, ctx, a) // the caller holds a already
	lockCtx, err := m.TryLock(outerA)
	if err != nil {
		t.Fatalf("TryLock by the owner of a member: %v", err)
	}
	if n, _ := a.HoldCount(lockCtx); n != 3 {
		t.Fatalf("HoldCount(a) = %d, want 3", n)
	}
	inner := mustLock(t, lockCtx, b) // the lock context re-enters members
	if n, _ := b.HoldCount(inner); n != 2 {
		t.Fatalf("HoldCount(b) = %d, want 2", n)
	}
	if err := b.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.HoldCount(outerA); n != 1 || isLocked(t, b) {
		t.Fatalf("after Unlock: HoldCount(a) = %d, b locked %v; want 1 and false", n, isLocked(t, b))
	}
	if err := a.Unlock(outerA); err != nil {
		t.Fatal(err)
	}
}

// TestMultiLockAcrossServers holds a Mutex on one server and a RedLock on
// three others as one lock.
func TestMultiLockAcrossServers(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	servers, clients := redLockNodes(t, 3)
	red := mustRedLock(t, clients, name+":red")
	mu := mustMutex(t, newClient(t, nil), name+":mutex")
	m := mustMultiLock(t, red, mu)

	lockCtx := mustLock(t, ctx, m)
	if !isLocked(t, red) || !isLocked(t, mu) {
		t.Fatal("not every member is locked")
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	eventuallyFree(t, name+":red", servers...)
	if isLocked(t, mu) {
		t.Fatal("the Mutex is still locked after Unlock")
	}
}

func TestNewMultiLockValidates(t *testing.T) {
	c := newClient(t, nil)
	a := mustMutex(t, c, "x")
	var nilMutex *Mutex
	for _, locks := range [][]Locker{nil, {a, nil}, {nilMutex}} {
		if _, err := NewMultiLock(locks...); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("NewMultiLock(%v): %v, want ErrInvalidOption", locks, err)
		}
	}
	m := mustMultiLock(t, a)
	if err := m.Unlock(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock without a lock context: %v, want ErrNotHeld", err)
	}
}
