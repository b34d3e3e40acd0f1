package contract

// The contract's tests, each run on a fresh lock name.

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock"
)

// inspector is what every kind but MultiLock offers to look at a lock.
type inspector interface {
	IsLocked(ctx context.Context) (bool, error)
	HoldCount(ctx context.Context) (int, error)
	TTL(ctx context.Context) (time.Duration, error)
}

type forceUnlocker interface {
	ForceUnlock(context.Context) (bool, error)
}

// fastWatchdog makes the watchdog notice a lost lock within ~100 ms.
var fastWatchdog = dlock.WithWatchdogTimeout(300 * time.Millisecond)

// steadyLease is the watchdog timeout of a holder whose lock must not run
// out on its own while the test looks at it (fastWatchdog's 300 ms did,
// on a loaded machine): it outlives a stall of over a second, and the
// watchdog still notices a lost lock within a second.
const steadyLease = 2 * time.Second

var steadyWatchdog = dlock.WithWatchdogTimeout(steadyLease)

func (k *contract) mustOpen(cs []*dlock.Client, name string, opts ...dlock.LockOption) dlock.Locker {
	k.t.Helper()
	l, err := k.open(cs, name, opts...)
	if err != nil {
		k.t.Fatal(err)
	}
	return l
}

// mustRival opens the handle that excludes k's handles on lock name.
func (k *contract) mustRival(cs []*dlock.Client, name string) dlock.Locker {
	k.t.Helper()
	if k.rival == nil {
		return k.mustOpen(cs, name)
	}
	l, err := k.rival(cs, name)
	if err != nil {
		k.t.Fatal(err)
	}
	return l
}

// free reports whether the rival can take lock name right now (and frees
// free reports whether the rival can take lock name right now (and frees
// it again): whether no other owner holds it.
func (k *contract) free(name string) bool {
	k.t.Helper()
	r := k.mustRival(k.newClients(), name)
	l, err := r.TryLock(context.Background())
	if errors.Is(err, dlock.ErrNotObtained) {
		return false
	}
	if err != nil {
		k.t.Fatal(err)
	}
	if err := r.Unlock(l); err != nil {
		k.t.Fatal(err)
	}
	return true
}

// reentrancy: a lock context (or one derived from it) re-enters the lock;
// each Unlock ends its own lock context; the lock is free after the last,
// and a hold is released once.
func (k *contract) reentrancy(name string) {
	t, ctx := k.t, context.Background()
	cs := k.newClients()
	l := k.mustOpen(cs, name)
	if k.noReentry {
		k.noReentrancy(cs, l, name)
		return
	}
	l1 := mustLock(t, ctx, l)
	l2 := mustLock(t, l1, l)
	l3 := mustLock(t, context.WithValue(l2, derivedKey{}, 1), l) // derived contexts re-enter too
	if in, ok := l.(inspector); ok {
		for _, lc := range []context.Context{l1, l2, l3} {
			if n, err := in.HoldCount(lc); n != 3 || err != nil {
				t.Fatalf("HoldCount = %d, %v; want 3", n, err)
			}
		}
		if n, err := in.HoldCount(ctx); n != 0 || err != nil {
			t.Errorf("HoldCount without owner = %d, %v; want 0", n, err)
		}
	}
	for i, lc := range []context.Context{l3, l2} {
		if err := l.Unlock(lc); err != nil {
			t.Fatal(err)
		}
		if lc.Err() == nil || !errors.Is(context.Cause(lc), dlock.ErrUnlocked) {
			t.Errorf("lock context %d not ended with ErrUnlocked: %v", i, context.Cause(lc))
		}
		if k.free(name) {
			t.Fatal("lock freed before the last Unlock")
		}
	}
	if l1.Err() != nil {
		t.Fatal("outer lock context ended before its Unlock")
	}
	if in, ok := l.(inspector); ok {
		if n, err := in.HoldCount(l1); n != 1 || err != nil {
			t.Errorf("HoldCount = %d, %v after two Unlocks; want 1", n, err)
		}
	}
	if err := l.Unlock(l1); err != nil {
		t.Fatal(err)
	}
	if !k.free(name) {
		t.Error("still locked after the last Unlock")
	}
	if err := l.Unlock(l1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("extra Unlock: %v, want ErrNotHeld", err)
	}
	k.noRenewals(cs)
}

// noReentrancy is reentrancy inverted, for a kind that refuses re-entry:
// a Lock or TryLock with the lock context (or one derived from it) fails
// at once with dlock.ErrNotReentrant, without touching the hold, which the one
// Unlock releases; another owner still waits its turn.
func (k *contract) noReentrancy(cs []*dlock.Client, l dlock.Locker, name string) {
	t, ctx := k.t, context.Background()
	l1 := mustLock(t, ctx, l)
	for what, call := range map[string]func(context.Context) (context.Context, error){"Lock": l.Lock, "TryLock": l.TryLock} {
		for _, lc := range []context.Context{l1, context.WithValue(l1, derivedKey{}, 1)} {
			wait, cancel := context.WithTimeout(lc, 10*time.Second)
			start := time.Now()
			got, err := call(wait)
			cancel()
			if !errors.Is(err, dlock.ErrNotReentrant) || got != nil {
				t.Fatalf("%s re-entering: %v, %v; want ErrNotReentrant", what, got, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s re-entering failed after %v: it waited", what, d)
			}
		}
	}
	if l1.Err() != nil {
		t.Fatalf("a refused re-entry ended the hold's lock context: %v", context.Cause(l1))
	}
	if in, ok := l.(inspector); ok {
		if n, err := in.HoldCount(l1); n != 1 || err != nil {
			t.Errorf("HoldCount = %d, %v after refused re-entries; want 1", n, err)
		}
	}
	if k.free(name) {
		t.Fatal("another owner took a lock that is held")
	}
	if err := l.Unlock(l1); err != nil {
		t.Fatal(err)
	}
	if !k.free(name) {
		t.Error("still locked after the one Unlock")
	}
	k.noRenewals(cs)
}

// fencing: with WithFencing every acquisition, reentrant ones included,
// carries a strictly larger token; without it there is none.
func (k *contract) fencing(name string) {
	t, ctx := k.t, context.Background()
	a := k.mustOpen(k.newClients(), name, dlock.WithFencing())
	b := k.mustOpen(k.newClients(), name, dlock.WithFencing())
	next := tokenChecker(t)
	for range 2 {
		la := mustLock(t, ctx, a)
		next(la)
		held := []context.Context{la}
		if !k.noReentry {
			la2 := mustLock(t, la, a)
			next(la2)
			held = []context.Context{la2, la}
		}
		for _, lc := range held {
			if err := a.Unlock(lc); err != nil {
				t.Fatal(err)
			}
		}
		lb := mustLock(t, ctx, b)
		next(lb)
		if err := b.Unlock(lb); err != nil {
			t.Fatal(err)
		}
	}
	plain := k.mustOpen(k.newClients(), name)
	lp := mustLock(t, ctx, plain)
	if _, ok := dlock.Token(lp); ok {
		t.Error("an unfenced lock context has a token")
	}
	if err := plain.Unlock(lp); err != nil {
		t.Fatal(err)
	}
}

// lostLock: when the lock disappears from Redis the watchdog's next
// renewal tells the holder: its lock context (and those derived from it)
// end with dlock.ErrLockLost, and Unlock says the hold is gone.
func (k *contract) lostLock(name string) {
	t, ctx := k.t, context.Background()
	l := k.mustOpen(k.newClients(fastWatchdog), name)
	lc := mustLock(t, ctx, l)
	child, cancel := context.WithCancel(lc)
	defer cancel()
	k.wipe(name)
	awaitDone(t, child, 5*time.Second, "holder told that its lock was deleted")
	for _, x := range []context.Context{lc, child} {
		if !errors.Is(context.Cause(x), dlock.ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(x))
		}
	}
	if err := l.Unlock(lc); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lock: %v, want ErrNotHeld", err)
	}
}

// missedNotice: a waiter whose subscription dies, and cannot come back
// before the unlock message is published, still gets the lock at once
// (the resubscription wakes it), not when the holder's 30 s lease ends.
func (k *contract) missedNotice(name string) {
	t, ctx := k.t, k.t.Context()
	if k.channel == nil || len(k.deployments) != 1 {
		t.Skip("the kind polls: no unlock message to miss")
	}
	holder := k.mustRival(k.newClients(), name)
	held := mustLock(t, ctx, holder)
	var g dialGate
	wc := k.deployments[0].Client(t, g.dial)
	waiter := k.mustOpen([]*dlock.Client{wc}, name)
	got := lockAndUnlock(ctx, waiter)
	channel := k.awaitWaiter(name)
	k.missNotice(&g, channel, func() error { return holder.Unlock(held) })
	if err := recv(t, got, 10*time.Second, "waiter after missing the unlock message"); err != nil {
		t.Fatal(err)
	}
}

// forceUnlock frees a lock held by another owner, wakes a waiter, and the
// old holder hears of its loss from the watchdog; a free lock is not
// freed again.
func (k *contract) forceUnlock(name string) {
	t, ctx := k.t, context.Background()
	holder := k.mustOpen(k.newClients(steadyWatchdog), name)
	f, ok := holder.(forceUnlocker)
	if !ok {
		t.Skipf("%s has no ForceUnlock", k.name)
	}
	l := mustLock(t, ctx, holder)
	got := lockAndUnlock(ctx, k.mustRival(k.newClients(), name))
	k.awaitWaiter(name)
	if ok, err := f.ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	if err := recv(t, got, 5*time.Second, "waiter after ForceUnlock"); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, l, 5*time.Second, "old holder told by the watchdog")
	if !errors.Is(context.Cause(l), dlock.ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l))
	}
	// Unlock returns once the lock is released where it must be (a
	// RedLock's at a quorum): a last node's release may still be on its
	// way. The lock is free once no server has its keys.
	eventually(t, 5*time.Second, func() error { return k.keysLeft(ctx, name) })
	if ok, err := f.ForceUnlock(ctx); ok || err != nil {
		t.Errorf("ForceUnlock of a free lock = %v, %v; want false", ok, err)
	}
}

// inspect: IsLocked, HoldCount and TTL of a free lock, of a lock with a
// fixed lease, and of one the watchdog renews.
func (k *contract) inspect(name string) {
	t, ctx := k.t, context.Background()
	const lease = 10 * time.Second
	l := k.mustOpen(k.newClients(), name, dlock.WithLease(lease))
	in, ok := l.(inspector)
	if !ok {
		t.Skipf("%s has no IsLocked, HoldCount, TTL", k.name)
	}
	check := func(what string, in inspector, lc context.Context, locked bool, holds int, maxTTL time.Duration) {
		t.Helper()
		if got, err := in.IsLocked(ctx); got != locked || err != nil {
			t.Errorf("%s: IsLocked = %v, %v; want %v", what, got, err, locked)
		}
		if n, err := in.HoldCount(lc); n != holds || err != nil {
			t.Errorf("%s: HoldCount = %d, %v; want %d", what, n, err, holds)
		}
		d, err := in.TTL(ctx)
		if err != nil || d > maxTTL || (maxTTL > 0) != (d > 0) {
			t.Errorf("%s: TTL = %v, %v; want in (0, %v]", what, d, err, maxTTL)
		}
	}
	check("free", in, ctx, false, 0, 0)
	lc := mustLock(t, ctx, l)
	check("leased", in, lc, true, 1, lease)
	if err := l.Unlock(lc); err != nil {
		t.Fatal(err)
	}
	// The owner of the ended lock context, whom Redis no longer has.
	check("unlocked", in, context.WithoutCancel(lc), false, 0, 0)
	w := k.mustOpen(k.newClients(steadyWatchdog), name)
	wl := mustLock(t, ctx, w)
	check("renewed", w.(inspector), wl, true, 1, steadyLease)
	if err := w.Unlock(wl); err != nil {
		t.Fatal(err)
	}
}

// badInput: a nil context, the zero value and an option of another kind
// are refused with dlock.ErrInvalidOption, never a panic.
func (k *contract) badInput(name string) {
	t, ctx := k.t, context.Background()
	l := k.mustOpen(k.newClients(), name)
	lc := mustLock(t, ctx, l)
	defer l.Unlock(lc)
	for _, c := range []struct {
		what string
		l    dlock.Locker
		ctx  context.Context
	}{{"nil context", l, nil}, {"zero value", k.zero, ctx}} {
		calls := map[string]func() error{
			"Lock":    func() error { _, err := c.l.Lock(c.ctx); return err },
			"TryLock": func() error { _, err := c.l.TryLock(c.ctx); return err },
			"Unlock":  func() error { return c.l.Unlock(c.ctx) },
		}
		if in, ok := c.l.(inspector); ok {
			calls["IsLocked"] = func() error { _, err := in.IsLocked(c.ctx); return err }
			calls["HoldCount"] = func() error { _, err := in.HoldCount(c.ctx); return err }
			calls["TTL"] = func() error { _, err := in.TTL(c.ctx); return err }
		}
		if f, ok := c.l.(forceUnlocker); ok {
			calls["ForceUnlock"] = func() error { _, err := f.ForceUnlock(c.ctx); return err }
		}
		for call, f := range calls {
			if err := noPanic(f); !errors.Is(err, dlock.ErrInvalidOption) {
				t.Errorf("%s: %s: %v, want ErrInvalidOption", c.what, call, err)
			}
		}
	}
	if k.foreign != nil {
		if _, err := k.open(k.newClients(), name, k.foreign); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("an option of another kind: %v, want ErrInvalidOption", err)
		}
	}
}

// close: closing the Clients ends their holds with ErrClosed, wakes their
// waiting Locks with ErrClosed and refuses later calls.
func (k *contract) close(name string) {
	t, ctx := k.t, context.Background()
	holder := k.mustRival(k.newClients(), name)
	hl := mustLock(t, ctx, holder)
	defer holder.Unlock(hl)
	cs := k.newClients()
	waiter := k.mustOpen(cs, name)
	mine := k.mustOpen(cs, name+":mine")
	ml := mustLock(t, ctx, mine)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx)
		got <- err
	}()
	k.awaitWaiter(name)
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := recv(t, got, 5*time.Second, "waiting Lock after Close"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("waiting Lock: %v, want ErrClosed", err)
	}
	awaitDone(t, ml, 5*time.Second, "held lock context after Close")
	if !errors.Is(context.Cause(ml), dlock.ErrClosed) {
		t.Errorf("held lock context: %v, want ErrClosed", context.Cause(ml))
	}
	if _, err := waiter.Lock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if _, err := k.open(cs, name); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a new handle after Close: %v, want ErrClosed", err)
	}
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	k.wipe(name + ":mine")
}

// derivedKey keys the value of a context derived from a lock context.
type derivedKey struct{}
