package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDo checks that Do runs fn while holding the lock and releases it
// afterwards, whatever fn returns.
func TestDo(t *testing.T) {
	ctx := t.Context()
	name := lockName(t)
	c := newClient(t, nil)
	m := mustMutex(t, c, name)
	probe := mustMutex(t, newClient(t, nil), name)

	errWork := errors.New("work failed")
	for _, want := range []error{nil, errWork} {
		ran := false
		err := Do(ctx, m, func(lockCtx context.Context) error {
			ran = true
			if locked, err := probe.IsLocked(ctx); !locked || err != nil {
				t.Errorf("inside Do: IsLocked = %v, %v; want true", locked, err)
			}
			if n, err := m.HoldCount(lockCtx); n != 1 || err != nil {
				t.Errorf("inside Do: HoldCount = %d, %v; want 1", n, err)
			}
			return want
		})
		if !ran || !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("Do with fn returning %v: ran %v, err %v", want, ran, err)
		}
		if locked, err := probe.IsLocked(ctx); locked || err != nil {
			t.Errorf("after Do (fn returned %v): IsLocked = %v, %v; want false", want, locked, err)
		}
	}
}

// TestDoNotObtained: when the lock cannot be had before ctx ends, Do
// returns the error of Lock and never calls fn.
func TestDoNotObtained(t *testing.T) {
	name := lockName(t)
	holder := mustMutex(t, newClient(t, nil), name)
	held := mustLock(t, t.Context(), holder)
	defer holder.Unlock(held)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := Do(ctx, mustMutex(t, newClient(t, nil), name), func(context.Context) error {
		t.Error("fn ran without the lock")
		return nil
	})
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrNotObtained and DeadlineExceeded", err)
	}
}

// TestDoLockLost: a lock deleted while fn runs makes Do's error wrap
// ErrLockLost even though fn succeeded, and the Unlock error too.
func TestDoLockLost(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	m := mustMutex(t, newClient(t, nil), name, WithLease(200*time.Millisecond))
	err := Do(t.Context(), m, func(lockCtx context.Context) error {
		if err := rdb.Del(t.Context(), name).Err(); err != nil {
			t.Fatal(err)
		}
		awaitDone(t, lockCtx, 10*time.Second, "the lock context of a deleted lock") // the lease runs out on the local clock
		return nil
	})
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrNotHeld) {
		t.Errorf("err = %v, want it to wrap ErrLockLost and ErrNotHeld", err)
	}
}

// TestDoPanic: a panic in fn reaches the caller after the lock is
// released.
func TestDoPanic(t *testing.T) {
	name := lockName(t)
	c := newClient(t, nil)
	m := mustMutex(t, c, name)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = Do(t.Context(), m, func(context.Context) error { panic("boom") })
	}()
	if locked, err := m.IsLocked(t.Context()); locked || err != nil {
		t.Errorf("after a panic in fn: IsLocked = %v, %v; want false", locked, err)
	}
}

// TestDoExcludes runs Do from goroutines on several Clients: the shared
// mutual-exclusion check with Do as the critical section.
func TestDoExcludes(t *testing.T) {
	name := lockName(t)
	checkMutualExclusion(t, name, 3, 4, 120, func(c *Client) Locker {
		return doLocker{mustMutex(t, c, name)}
	})
}

// doLocker runs the critical section of checkMutualExclusion inside Do:
// Lock starts Do and returns once fn runs; Unlock lets fn return and
// waits for Do.
type doLocker struct{ m *Mutex }

type doHold struct {
	context.Context
	release chan struct{}
	done    chan error
}

func (d doLocker) Name() string { return d.m.Name() }

func (d doLocker) Lock(ctx context.Context) (context.Context, error) {
	inside := make(chan context.Context, 1)
	h := &doHold{release: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		h.done <- Do(ctx, d.m, func(lockCtx context.Context) error {
			inside <- lockCtx
			<-h.release
			return nil
		})
	}()
	select {
	case lockCtx := <-inside:
		h.Context = lockCtx
		return h, nil
	case err := <-h.done:
		return nil, err
	}
}

func (d doLocker) TryLock(ctx context.Context) (context.Context, error) {
	return nil, fmt.Errorf("doLocker: TryLock not supported")
}

func (d doLocker) Unlock(lockCtx context.Context) error {
	h := lockCtx.(*doHold)
	close(h.release)
	select {
	case err := <-h.done:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("doLocker: Do did not return within 10s of the release")
	}
}

// TestDoInvalidArguments: Do with a nil Locker, a nil *Mutex or a nil fn
// returns an error wrapping ErrInvalidOption rather than panicking, and
// with a nil fn does not even try to take the lock: here another owner
// holds it, so a Do that tried would wait for it until ctx ends.
func TestDoInvalidArguments(t *testing.T) {
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name)
	holder := mustMutex(t, newClient(t, nil), name)
	held := mustLock(t, t.Context(), holder)
	defer holder.Unlock(held)
	for _, tc := range []struct {
		what string
		l    Locker
		fn   func(context.Context) error
	}{
		{"nil Locker", nil, func(context.Context) error { return nil }},
		{"nil *Mutex", (*Mutex)(nil), func(context.Context) error { return nil }},
		{"nil fn", m, nil},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return Do(ctx, tc.l, tc.fn)
		}()
		cancel()
		if !errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrNotObtained) {
			t.Errorf("Do with a %s: %v, want ErrInvalidOption without trying the lock", tc.what, err)
		}
	}
}
