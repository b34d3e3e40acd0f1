package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The contract every lock kind keeps, written once and run for each kind
// (in the spirit of testing/fstest.TestFS): reentrancy, fencing, the
// notice of a lost lock, a waiter that missed the unlock message, force
// unlock, IsLocked/HoldCount/TTL, nil contexts and zero values, options of
// other kinds, and Close. Kind-specific rules (a fair lock's queue, a
// read-write lock's modes, RedLock's quorum) stay in the kinds' own tests.

// contractKind says how to make the handles of one lock kind.
type contractKind struct {
	name string
	// setup starts what the kind needs and returns a function that makes
	// a fresh set of Clients (one per server: what one process would
	// have), and clients for checks on every server.
	setup func(t *testing.T) (newClients func(opts ...Option) []*Client, admins []*redis.Client)
	// open makes a handle on lock name on cs.
	open func(cs []*Client, name string, opts ...LockOption) (Locker, error)
	// rival, when set, makes the handle that excludes open's (a reader's
	// rival is a writer); open's own by default.
	rival func(cs []*Client, name string) (Locker, error)
	// keys are what a hold of lock name puts in Redis, on every server.
	keys func(name string) []string
	// channel is the channel a waiter for lock name subscribes to first,
	// or "" when the kind polls.
	channel func(name string) string
	// zero is the kind's zero value, which must refuse every call.
	zero Locker
	// foreign is an option of another kind, which the kind must refuse.
	foreign LockOption
	// noReentry is set for kinds that refuse re-entry (WithoutReentry):
	// the re-entry rules are inverted.
	noReentry bool
}

// oneServer is the setup of the kinds that live on the test server.
func oneServer(t *testing.T) (func(opts ...Option) []*Client, []*redis.Client) {
	return func(opts ...Option) []*Client { return []*Client{newClient(t, nil, opts...)} }, []*redis.Client{newRedis(t)}
}

func contractKinds() []contractKind {
	lockKey := func(name string) []string { return []string{name} }
	lockChannel := func(name string) string { return prefixName(channelPrefix, name) }
	rwHalf := func(write bool) func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
		return func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			rw, err := cs[0].NewRWMutex(name, opts...)
			switch {
			case err != nil:
				return nil, err
			case write:
				return rw.WriteLock(), nil
			}
			return rw.ReadLock(), nil
		}
	}
	return []contractKind{{
		name:  "Mutex",
		setup: oneServer,
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			return cs[0].NewMutex(name, opts...)
		},
		keys:    lockKey,
		channel: lockChannel,
		zero:    &Mutex{},
		foreign: WithNodeTimeout(time.Millisecond),
	}, {
		name:  "FairMutex",
		setup: oneServer,
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			return cs[0].NewFairMutex(name, opts...)
		},
		keys: lockKey,
		// A fair waiter's channel is the lock channel and its owner.
		channel: func(name string) string { return lockChannel(name) + ":*" },
		zero:    &FairMutex{},
		foreign: WithNodeTimeout(time.Millisecond),
	}, {
		name:  "SpinLock",
		setup: oneServer,
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			return cs[0].NewSpinLock(name, opts...)
		},
		keys:    lockKey, // no channel: the kind polls
		zero:    &SpinLock{},
		foreign: WithFairWaitTimeout(time.Second),
	}, {
		name:  "Mutex/WithoutReentry",
		setup: oneServer,
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			return cs[0].NewMutex(name, append(opts, WithoutReentry())...)
		},
		keys:      lockKey,
		channel:   lockChannel,
		zero:      &Mutex{},
		foreign:   WithBackoff(time.Millisecond, time.Millisecond),
		noReentry: true,
	}, {
		name:  "FairMutex/WithoutReentry",
		setup: oneServer,
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			return cs[0].NewFairMutex(name, append(opts, WithoutReentry())...)
		},
		keys:      lockKey,
		channel:   func(name string) string { return lockChannel(name) + ":*" },
		zero:      &FairMutex{},
		foreign:   WithNodeTimeout(time.Millisecond),
		noReentry: true,
	}, {
		name:    "ReadLock",
		setup:   oneServer,
		open:    rwHalf(false),
		rival:   func(cs []*Client, name string) (Locker, error) { return rwHalf(true)(cs, name) },
		keys:    lockKey,
		channel: func(name string) string { return prefixName(rwChannelPrefix, name) },
		zero:    &ReadLock{},
		foreign: WithFairWaitTimeout(time.Second),
	}, {
		name:    "WriteLock",
		setup:   oneServer,
		open:    rwHalf(true),
		keys:    lockKey,
		channel: func(name string) string { return prefixName(rwChannelPrefix, name) },
		zero:    &WriteLock{},
		foreign: WithFairWaitTimeout(time.Second),
	}, {
		name:  "MultiLock",
		setup: oneServer,
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			a, err := cs[0].NewMutex(name+":a", opts...)
			if err != nil {
				return nil, err
			}
			b, err := cs[0].NewFairMutex(name+":b", opts...)
			if err != nil {
				return nil, err
			}
			return NewMultiLock(a, b)
		},
		keys:    func(name string) []string { return []string{name + ":a", name + ":b"} },
		channel: func(name string) string { return lockChannel(name + ":a") },
		zero:    &MultiLock{},
	}, {
		name: "RedLock",
		setup: func(t *testing.T) (func(opts ...Option) []*Client, []*redis.Client) {
			servers, _ := redLockNodes(t, 3)
			admins := make([]*redis.Client, len(servers))
			for i, s := range servers {
				admins[i] = newRedisAt(t, s.Addr())
			}
			return func(opts ...Option) []*Client { return redClients(t, servers, opts...) }, admins
		},
		open: func(cs []*Client, name string, opts ...LockOption) (Locker, error) {
			return NewRedLock(cs, name, opts...)
		},
		keys:    lockKey,
		zero:    &RedLock{},
		foreign: WithFairWaitTimeout(time.Second),
	}}
}

// inspector is what every kind but MultiLock offers to look at a lock.
type inspector interface {
	IsLocked(ctx context.Context) (bool, error)
	HoldCount(ctx context.Context) (int, error)
	TTL(ctx context.Context) (time.Duration, error)
}

// contract is one kind's contract tests on one setup.
type contract struct {
	contractKind
	t          *testing.T
	newClients func(opts ...Option) []*Client
	admins     []*redis.Client
}

// fastWatchdog makes the watchdog notice a lost lock within ~100 ms.
var fastWatchdog = WithWatchdogTimeout(300 * time.Millisecond)

func (k *contract) mustOpen(cs []*Client, name string, opts ...LockOption) Locker {
	k.t.Helper()
	l, err := k.open(cs, name, opts...)
	if err != nil {
		k.t.Fatal(err)
	}
	return l
}

// mustRival opens the handle that excludes k's handles on lock name.
func (k *contract) mustRival(cs []*Client, name string) Locker {
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
// it again): whether no other owner holds it.
func (k *contract) free(name string) bool {
	k.t.Helper()
	r := k.mustRival(k.newClients(), name)
	l, err := r.TryLock(context.Background())
	if errors.Is(err, ErrNotObtained) {
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

// wipe deletes lock name's keys behind its holders' backs.
func (k *contract) wipe(name string) {
	k.t.Helper()
	for _, a := range k.admins {
		if err := a.Del(context.Background(), k.keys(name)...).Err(); err != nil {
			k.t.Fatal(err)
		}
	}
}

// awaitWaiter waits until a waiter for lock name has subscribed to its
// channel, and returns that channel ("" when the kind polls).
func (k *contract) awaitWaiter(name string) (channel string) {
	k.t.Helper()
	if k.channel == nil || len(k.admins) != 1 {
		return ""
	}
	eventually(k.t, 5*time.Second, func() error {
		chs, err := k.admins[0].PubSubChannels(context.Background(), k.channel(name)).Result()
		if err != nil || len(chs) != 1 {
			return fmt.Errorf("no waiter subscribed yet (%v, %v)", chs, err)
		}
		channel = chs[0]
		return nil
	})
	return channel
}

// noRenewals fails unless no Client of cs renews a lock.
func noRenewals(t *testing.T, cs []*Client) {
	t.Helper()
	for _, c := range cs {
		if n := c.watchdog.Len(); n != 0 {
			t.Errorf("watchdog still renews %d locks", n)
		}
	}
}

func TestContract(t *testing.T) {
	for _, kind := range contractKinds() {
		t.Run(kind.name, func(t *testing.T) {
			newClients, admins := kind.setup(t)
			k := &contract{contractKind: kind, t: t, newClients: newClients, admins: admins}
			for _, c := range []struct {
				name string
				run  func(k *contract, name string)
			}{
				{"Reentrancy", (*contract).reentrancy},
				{"Fencing", (*contract).fencing},
				{"LostLock", (*contract).lostLock},
				{"MissedNotice", (*contract).missedNotice},
				{"ForceUnlock", (*contract).forceUnlock},
				{"Inspect", (*contract).inspect},
				{"BadInput", (*contract).badInput},
				{"Close", (*contract).close},
			} {
				t.Run(c.name, func(t *testing.T) {
					sub := *k
					sub.t = t
					c.run(&sub, lockName(t))
				})
			}
		})
	}
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
		if lc.Err() == nil || !errors.Is(context.Cause(lc), ErrUnlocked) {
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
	if err := l.Unlock(l1); !errors.Is(err, ErrNotHeld) {
		t.Errorf("extra Unlock: %v, want ErrNotHeld", err)
	}
	noRenewals(t, cs)
}

// noReentrancy is reentrancy inverted, for a kind that refuses re-entry:
// a Lock or TryLock with the lock context (or one derived from it) fails
// at once with ErrNotReentrant, without touching the hold, which the one
// Unlock releases; another owner still waits its turn.
func (k *contract) noReentrancy(cs []*Client, l Locker, name string) {
	t, ctx := k.t, context.Background()
	l1 := mustLock(t, ctx, l)
	for what, call := range map[string]func(context.Context) (context.Context, error){"Lock": l.Lock, "TryLock": l.TryLock} {
		for _, lc := range []context.Context{l1, context.WithValue(l1, derivedKey{}, 1)} {
			wait, cancel := context.WithTimeout(lc, 10*time.Second)
			start := time.Now()
			got, err := call(wait)
			cancel()
			if !errors.Is(err, ErrNotReentrant) || got != nil {
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
	noRenewals(t, cs)
}

// fencing: with WithFencing every acquisition, reentrant ones included,
// carries a strictly larger token; without it there is none.
func (k *contract) fencing(name string) {
	t, ctx := k.t, context.Background()
	a := k.mustOpen(k.newClients(), name, WithFencing())
	b := k.mustOpen(k.newClients(), name, WithFencing())
	next, _ := tokenChecker(t)
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
	if _, ok := Token(lp); ok {
		t.Error("an unfenced lock context has a token")
	}
	if err := plain.Unlock(lp); err != nil {
		t.Fatal(err)
	}
}

// lostLock: when the lock disappears from Redis the watchdog's next
// renewal tells the holder: its lock context (and those derived from it)
// end with ErrLockLost, and Unlock says the hold is gone.
func (k *contract) lostLock(name string) {
	t, ctx := k.t, context.Background()
	l := k.mustOpen(k.newClients(fastWatchdog), name)
	lc := mustLock(t, ctx, l)
	child, cancel := context.WithCancel(lc)
	defer cancel()
	k.wipe(name)
	awaitDone(t, child, 5*time.Second, "holder told that its lock was deleted")
	for _, x := range []context.Context{lc, child} {
		if !errors.Is(context.Cause(x), ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", context.Cause(x))
		}
	}
	if err := l.Unlock(lc); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a lost lock: %v, want ErrNotHeld", err)
	}
}

// missedNotice: a waiter whose subscription dies, and cannot come back
// before the unlock message is published, still gets the lock at once
// (the resubscription wakes it), not when the holder's 30 s lease ends.
func (k *contract) missedNotice(name string) {
	t, ctx := k.t, k.t.Context()
	if k.channel == nil || len(k.admins) != 1 {
		t.Skip("the kind polls: no unlock message to miss")
	}
	holder := k.mustRival(k.newClients(), name)
	held := mustLock(t, ctx, holder)
	var g dialGate
	wc := gatedClient(t, &g)
	waiter := k.mustOpen([]*Client{wc}, name)
	got := lockAndUnlock(ctx, waiter)
	channel := k.awaitWaiter(name)
	missNotice(t, wc, &g, channel, func() error { return holder.Unlock(held) })
	if err := recv(t, got, 10*time.Second, "waiter after missing the unlock message"); err != nil {
		t.Fatal(err)
	}
}

// forceUnlock frees a lock held by another owner, wakes a waiter, and the
// old holder hears of its loss from the watchdog; a free lock is not
// freed again.
func (k *contract) forceUnlock(name string) {
	t, ctx := k.t, context.Background()
	holder := k.mustOpen(k.newClients(fastWatchdog), name)
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
	if !errors.Is(context.Cause(l), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l))
	}
	// Unlock returns once the lock is released where it must be (a
	// RedLock's at a quorum): a last node's release may still be on its
	// way. The lock is free once no server has its keys.
	eventually(t, 5*time.Second, func() error {
		for _, a := range k.admins {
			if n, err := a.Exists(ctx, k.keys(name)...).Result(); err != nil || n != 0 {
				return fmt.Errorf("%s: %d of the lock's keys left (%v)", a.Options().Addr, n, err)
			}
		}
		return nil
	})
	if ok, err := f.ForceUnlock(ctx); ok || err != nil {
		t.Errorf("ForceUnlock of a free lock = %v, %v; want false", ok, err)
	}
}

// inspect: IsLocked, HoldCount and TTL of a free lock, of a lock with a
// fixed lease, and of one the watchdog renews.
func (k *contract) inspect(name string) {
	t, ctx := k.t, context.Background()
	const lease = 10 * time.Second
	l := k.mustOpen(k.newClients(), name, WithLease(lease))
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
	check("unlocked", in, ctx, false, 0, 0)
	w := k.mustOpen(k.newClients(fastWatchdog), name)
	wl := mustLock(t, ctx, w)
	check("renewed", w.(inspector), wl, true, 1, 300*time.Millisecond)
	if err := w.Unlock(wl); err != nil {
		t.Fatal(err)
	}
}

// badInput: a nil context, the zero value and an option of another kind
// are refused with ErrInvalidOption, never a panic.
func (k *contract) badInput(name string) {
	t, ctx := k.t, context.Background()
	l := k.mustOpen(k.newClients(), name)
	lc := mustLock(t, ctx, l)
	defer l.Unlock(lc)
	for _, c := range []struct {
		what string
		l    Locker
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
			if err := noPanic(f); !errors.Is(err, ErrInvalidOption) {
				t.Errorf("%s: %s: %v, want ErrInvalidOption", c.what, call, err)
			}
		}
	}
	if k.foreign != nil {
		if _, err := k.open(k.newClients(), name, k.foreign); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("an option of another kind: %v, want ErrInvalidOption", err)
		}
	}
}

// noPanic runs f and turns a panic into an error.
func noPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
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
	if err := recv(t, got, 5*time.Second, "waiting Lock after Close"); !errors.Is(err, ErrClosed) {
		t.Errorf("waiting Lock: %v, want ErrClosed", err)
	}
	awaitDone(t, ml, 5*time.Second, "held lock context after Close")
	if !errors.Is(context.Cause(ml), ErrClosed) {
		t.Errorf("held lock context: %v, want ErrClosed", context.Cause(ml))
	}
	if _, err := waiter.Lock(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if _, err := k.open(cs, name); !errors.Is(err, ErrClosed) {
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
