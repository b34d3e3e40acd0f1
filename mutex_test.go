package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestMutualExclusion: 8 goroutines on each of 2 Clients increment a Redis
// counter with a non-atomic GET then SET under the lock, 2,000 times in all.
func TestMutualExclusion(t *testing.T) {
	name := lockName(t)
	checkMutualExclusion(t, name, 2, 8, 2000, func(c *Client) Locker { return mustMutex(t, c, name) })
}

// TestSharedHandleExcludes: goroutines sharing one Mutex but not its lock
// context are different owners, as with a sync.Mutex field.
func TestSharedHandleExcludes(t *testing.T) {
	ctx := context.Background()
	m := mustMutex(t, newClient(t, nil), lockName(t))
	held := mustLock(t, ctx, m)
	errc := make(chan error, 2)
	go func() {
		_, err := m.TryLock(ctx)
		errc <- err
	}()
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := m.Lock(wctx)
		errc <- err
	}()
	for range 2 {
		if err := recv(t, errc, 5*time.Second, "second goroutine"); !errors.Is(err, ErrNotObtained) {
			t.Errorf("second goroutine: %v, want ErrNotObtained", err)
		}
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock without the lock context: %v, want ErrNotHeld", err)
	}
	other := mustMutex(t, newClient(t, nil), m.Name())
	if err := other.Unlock(held); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock through another Client: %v, want ErrNotHeld", err)
	}
	if err := m.Unlock(held); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name, WithLease(200*time.Millisecond))
	start := time.Now()
	l := mustLock(t, ctx, m)
	if ttl, err := m.TTL(ctx); ttl <= 0 || ttl > 200*time.Millisecond || err != nil {
		t.Errorf("TTL = %v, %v; want (0, 200ms]", ttl, err)
	}
	awaitDone(t, l, 5*time.Second, "lock context at the end of its lease")
	if !errors.Is(context.Cause(l), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l))
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("lock context ended after %v, before the lease", d)
	}
	other := mustMutex(t, newClient(t, nil), name)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	o := mustLock(t, wctx, other)
	if err := other.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(l); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock after expiry: %v, want ErrNotHeld", err)
	}
	if m.c.watchdog.Len() != 0 {
		t.Error("a fixed-lease lock was given to the watchdog")
	}
}

func TestWatchdogKeepsLock(t *testing.T) {
	ctx := context.Background()
	const timeout = 600 * time.Millisecond
	c := newClient(t, nil, WithWatchdogTimeout(timeout))
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)
	deadline := time.Now().Add(3*timeout + timeout/2)
	for time.Now().Before(deadline) {
		if l.Err() != nil {
			t.Fatalf("lock context ended: %v", context.Cause(l))
		}
		if !isLocked(t, m) {
			t.Fatal("lock expired while the watchdog should renew it")
		}
		time.Sleep(timeout / 10)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if c.watchdog.Len() != 0 {
		t.Error("watchdog still has the lock after Unlock")
	}
}

// TestRenewalStopsAtUnlock is Redisson #7272: renewal must not outlive the
// final unlock, even when the same owner takes the lock again right after
// with a fixed lease. A stale renewal would stretch that fixed lease to the
// watchdog timeout; the test watches the key's PTTL until it expires.
func TestRenewalStopsAtUnlock(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	const timeout, fixed = 450 * time.Millisecond, 120 * time.Millisecond // renewal every 150 ms
	c := newClient(t, nil, WithWatchdogTimeout(timeout))
	name := lockName(t)
	var wg sync.WaitGroup
	for i := range 4 {
		m := mustMutex(t, c, fmt.Sprintf("%s:%d", name, i))
		leased := mustMutex(t, c, m.Name(), WithLease(fixed))
		wg.Add(1)
		go func() { // no t.Fatal here: t.Error and return
			defer wg.Done()
			for range 6 {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := m.Unlock(l); err != nil {
					t.Error(err)
					return
				}
				// The same owner (l's values), a fixed lease.
				lctx, cancel := context.WithTimeout(context.WithoutCancel(l), 10*time.Second)
				_, err = leased.Lock(lctx)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				for {
					ttl, err := c.rdb.PTTL(ctx, m.Name()).Result()
					if err != nil {
						t.Error(err)
						return
					}
					if ttl < 0 {
						break // expired: nobody renewed it
					}
					if ttl > fixed {
						t.Errorf("fixed lease of %v stretched to %v by a stale renewal", fixed, ttl)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	awaitGroup(t, &wg, time.Minute, "the lockers")
	eventually(t, 2*time.Second, func() error {
		if n := c.watchdog.Len(); n != 0 {
			return fmt.Errorf("watchdog still has %d locks", n)
		}
		return nil
	})
}

// TestLostWhenDeleted: the lock is deleted behind the holder's back; the
// watchdog finds that at its next renewal (a third of the timeout) and
// tells the holder then, well before the lease it last set would have run
// out on the holder's clock.
func TestLostWhenDeleted(t *testing.T) {
	ctx := context.Background()
	const timeout = 3 * time.Second // renewal every second
	c := newClient(t, nil, WithWatchdogTimeout(timeout))
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)
	child, cancel := context.WithCancel(l)
	defer cancel()
	if err := c.rdb.Del(ctx, m.Name()).Err(); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	awaitDone(t, child, 2*timeout, "holder told that its lock was deleted")
	if d := time.Since(deleted); d > timeout*2/3 {
		t.Errorf("holder told %v after the deletion: not by the watchdog's renewal (every %v) but by its lease (%v) running out", d, timeout/3, timeout)
	}
	for _, x := range []context.Context{l, child} {
		if !errors.Is(context.Cause(x), ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(x))
		}
	}
	if err := m.Unlock(l); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a lost lock: %v, want ErrNotHeld", err)
	}
}

// TestWaiterWokenByUnlock: a waiter is woken by the unlock message, not by
// the holder's 30 s lease running out.
func TestWaiterWokenByUnlock(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	holder := mustMutex(t, newClient(t, nil), name)
	wc := newClient(t, nil)
	waiter := mustMutex(t, wc, name)
	for range 5 {
		l := mustLock(t, ctx, holder)
		got := lockAsync(t.Context(), waiter)
		waitForWaiter(t, wc, name)
		unlocked := time.Now()
		if err := holder.Unlock(l); err != nil {
			t.Fatal(err)
		}
		wl := await(t, got, 5*time.Second, "waiter after the unlock")
		d := time.Since(unlocked)
		t.Logf("handoff after %v", d)
		if d > 3*time.Second { // the holder's lease is 30 s
			t.Errorf("waiter acquired %v after the unlock", d)
		}
		if err := waiter.Unlock(wl); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForWaiter waits until some goroutine of c waits on the named lock
// with a confirmed subscription.
func waitForWaiter(t testing.TB, c *Client, name string) {
	t.Helper()
	ch := prefixName(channelPrefix, name)
	eventually(t, 5*time.Second, func() error {
		if c.hub.Waiters(ch) == 0 {
			return errors.New("no waiter yet")
		}
		n, err := c.rdb.PubSubNumSub(context.Background(), ch).Result()
		if err != nil || n[ch] == 0 {
			return fmt.Errorf("not subscribed yet (%v)", err)
		}
		return nil
	})
}

func TestCancelWhileWaiting(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	holder := mustMutex(t, newClient(t, nil), name)
	wc := newClient(t, nil)
	waiter := mustMutex(t, wc, name)
	l := mustLock(t, ctx, holder)
	defer holder.Unlock(l)
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(wctx)
		got <- err
	}()
	waitForWaiter(t, wc, name)
	cancel()
	cancelled := time.Now()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
			t.Errorf("err = %v, want ErrNotObtained wrapping context.Canceled", err)
		}
		if d := time.Since(cancelled); d > 500*time.Millisecond {
			t.Errorf("returned %v after cancel", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock did not return after its context was cancelled")
	}
	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer tcancel()
	if _, err := waiter.Lock(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestScriptFlush(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	m := mustMutex(t, c, lockName(t), WithFencing())
	for range 3 {
		l := mustLock(t, ctx, m)
		if err := c.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l2 := mustLock(t, l, m)
		if err := c.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(l2); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(l); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFencingTokens(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	a := mustMutex(t, newClient(t, nil), name, WithFencing())
	b := mustMutex(t, newClient(t, nil), name, WithFencing())
	plain := mustMutex(t, newClient(t, nil), name)
	next, last := tokenChecker(t)
	for range 3 {
		la := mustLock(t, ctx, a)
		next(la)
		la2 := mustLock(t, la, a) // reentrant acquisitions take a token too
		next(la2)
		for _, u := range []struct {
			m *Mutex
			l context.Context
		}{{a, la2}, {a, la}} {
			if err := u.m.Unlock(u.l); err != nil {
				t.Fatal(err)
			}
		}
		lb := mustLock(t, ctx, b)
		next(lb)
		if err := b.Unlock(lb); err != nil {
			t.Fatal(err)
		}
	}
	lp := mustLock(t, ctx, plain)
	if _, ok := Token(lp); ok {
		t.Error("an unfenced lock context has a token")
	}
	if err := plain.Unlock(lp); err != nil {
		t.Fatal(err)
	}
	if v, err := a.c.rdb.Get(ctx, "redisson_lock_token:{"+name+"}").Int64(); v != last() || err != nil {
		t.Errorf("token key = %d, %v; want %d", v, err, last())
	}
}
