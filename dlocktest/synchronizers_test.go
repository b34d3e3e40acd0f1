package dlocktest_test

// The synchronizers, elections, fencing and deadlock detection on the
// embedded server: what the contract suite (locks only) does not cover,
// each checked for its wait and its wake-up. docs/testing.md's table
// lists these.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// later runs f in a new goroutine and sends its error on the channel it
// returns.
func later(f func() error) <-chan error {
	got := make(chan error, 1)
	go func() { got <- f() }()
	return got
}

// waiting fails the test if got delivers within a short while: the call
// must still be waiting.
func waiting(t *testing.T, got <-chan error, what string) {
	t.Helper()
	select {
	case err := <-got:
		t.Fatalf("%s returned (%v) instead of waiting", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

// must returns v, and panics (failing the test binary) on an error that
// only a broken setup can cause.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestSynchronizers(t *testing.T) {
	t.Run("Semaphore", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		ctx := t.Context()
		a := must(srv.Client(t).NewSemaphore("sem"))
		b := must(srv.Client(t).NewSemaphore("sem"))
		if ok, err := a.TrySetPermits(ctx, 1); !ok || err != nil {
			t.Fatalf("TrySetPermits = %v, %v", ok, err)
		}
		if err := a.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got := later(func() error { return b.Acquire(ctx, 1) })
		waiting(t, got, "Acquire with no permit left")
		if err := a.Release(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := within(t, got, 5*time.Second, "Acquire after Release"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PermitSemaphore", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		ctx := t.Context()
		a := must(srv.Client(t, quick).NewPermitSemaphore("psem"))
		b := must(srv.Client(t, quick).NewPermitSemaphore("psem"))
		if err := a.SetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		pa := must(a.Acquire(ctx))
		var pb context.Context
		got := later(func() (err error) { pb, err = b.Acquire(ctx); return err })
		waiting(t, got, "Acquire with no permit left")
		if err := a.Release(pa); err != nil {
			t.Fatal(err)
		}
		if err := within(t, got, 5*time.Second, "Acquire after Release"); err != nil {
			t.Fatal(err)
		}
		// The watchdog's lease runs out under FastForward: the permit is
		// lost, as a lock is.
		srv.FastForward(time.Minute)
		within(t, pb.Done(), 5*time.Second, "permit context after its lease ran out")
		if !errors.Is(context.Cause(pb), dlock.ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(pb))
		}
	})
	t.Run("CountDownLatch", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		ctx := t.Context()
		l := must(srv.Client(t).NewCountDownLatch("latch"))
		w := must(srv.Client(t).NewCountDownLatch("latch"))
		if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
			t.Fatalf("TrySetCount = %v, %v", ok, err)
		}
		got := later(func() error { return w.Await(ctx) })
		for range 2 {
			waiting(t, got, "Await before the count reached 0")
			if _, err := l.CountDown(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := within(t, got, 5*time.Second, "Await at 0"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Election", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		ctx := t.Context()
		a := must(srv.Client(t, quick).NewElection("leader"))
		b := must(srv.Client(t, quick).NewElection("leader"))
		changes := b.Observe(ctx)
		la := must(a.Campaign(ctx, "a"))
		var lb context.Context
		got := later(func() (err error) { lb, err = b.Campaign(ctx, "b"); return err })
		waiting(t, got, "Campaign while another leads")
		if info, err := b.Leader(ctx); info.Value != "a" || err != nil {
			t.Fatalf("Leader = %+v, %v; want a", info, err)
		}
		if err := a.Resign(la); err != nil {
			t.Fatal(err)
		}
		if err := within(t, got, 5*time.Second, "Campaign after Resign"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.After(5 * time.Second); ; {
			select {
			case info := <-changes:
				if info.Value != "b" {
					continue
				}
			case <-deadline:
				t.Fatal("Observe never saw b elected")
			}
			break
		}
		srv.FastForward(time.Minute)
		within(t, lb.Done(), 5*time.Second, "leader context after its lease ran out")
	})
	t.Run("Fencing", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		ctx := t.Context()
		rdb := srv.Redis(t)
		m := must(srv.Client(t).NewMutex("fenced", dlock.WithFencing()))
		old := must(m.Lock(ctx))
		if err := m.Unlock(old); err != nil {
			t.Fatal(err)
		}
		cur := must(m.Lock(ctx))
		defer m.Unlock(cur)
		if err := dlock.FencedSet(ctx, rdb, dlock.FenceOf(cur), "account", "new", 0); err != nil {
			t.Fatal(err)
		}
		if err := dlock.FencedSet(ctx, rdb, dlock.FenceOf(old), "account", "stale", 0); !errors.Is(err, dlock.ErrStaleToken) {
			t.Errorf("a stale holder's write: %v, want ErrStaleToken", err)
		}
	})
	t.Run("DeadlockDetection", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		ctx := t.Context()
		opt := dlock.WithDeadlockDetection(50 * time.Millisecond)
		c1, c2 := srv.Client(t, opt), srv.Client(t, opt)
		x1, y1 := must(c1.NewMutex("x")), must(c1.NewMutex("y"))
		x2, y2 := must(c2.NewMutex("x")), must(c2.NewMutex("y"))
		hx := must(x1.Lock(ctx))
		hy := must(y2.Lock(ctx))
		got1 := later(func() error { _, err := y1.Lock(hx); return err })
		got2 := later(func() error { _, err := x2.Lock(hy); return err })
		var err error
		select {
		case err = <-got1:
			_ = x1.Unlock(hx)
			err = errors.Join(err, within(t, got2, 5*time.Second, "the other waiter"))
		case err = <-got2:
			_ = y2.Unlock(hy)
			err = errors.Join(err, within(t, got1, 5*time.Second, "the other waiter"))
		case <-time.After(10 * time.Second):
			t.Fatal("no waiter of the cycle gave up")
		}
		if !errors.Is(err, dlock.ErrDeadlock) {
			t.Errorf("waits: %v, want one ErrDeadlock", err)
		}
	})
}
