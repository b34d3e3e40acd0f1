package dlock

// Permits are kept by the Client's one watchdog, as lock holds are: these
// tests hold permits beside locks past several watchdog timeouts, take a
// fixed-lease permit back behind its holder's back, and set a permit's
// lease while a renewal of it is on its way.

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// TestPermitSemaphoreSharedWatchdog: a permit without fixed lease and a
// lock on one Client are both entries of its one watchdog, which renews
// both past several watchdog timeouts; a released permit leaves it.
func TestPermitSemaphoreSharedWatchdog(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const timeout = 300 * time.Millisecond // renewed every 100 ms
	c := newClient(t, nil, WithWatchdogTimeout(timeout))
	hs := mustPermitSemaphore(t, c, name)
	m := mustMutex(t, c, name+":lock")
	other := mustPermitSemaphore(t, newClient(t, nil), name)
	if _, err := other.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := hs.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.watchdog.Len(); n != 2 {
		t.Fatalf("the watchdog keeps %d entries, want 2: the lock's hold and the permit", n)
	}
	first := permitScore(ctx, t, hs, p)
	// Four timeouts pass: neither lease may run out meanwhile.
	select {
	case <-p.Done():
		t.Fatalf("permit lost while its Client's watchdog runs: %v", context.Cause(p))
	case <-l.Done():
		t.Fatalf("lock lost while its Client's watchdog runs: %v", context.Cause(l))
	case <-time.After(4 * timeout):
	}
	if score := permitScore(ctx, t, hs, p); score <= first {
		t.Fatalf("permit expiry %v after %v, not renewed (was %v)", score, 4*timeout, first)
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire while the renewed permit is held: %v", err)
	}
	if n, err := other.AcquiredPermits(ctx); err != nil || n != 1 {
		t.Fatalf("AcquiredPermits: %d, %v; want 1", n, err)
	}
	if err := hs.Release(p); err != nil {
		t.Fatal(err)
	}
	if n := c.watchdog.Len(); n != 1 {
		t.Errorf("the watchdog keeps %d entries after the permit's Release, want 1: the lock's hold", n)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if n := c.watchdog.Len(); n != 0 {
		t.Errorf("the watchdog keeps %d entries with nothing held", n)
	}
}

// TestPermitSemaphoreFixedLeaseLossNoticed: a permit with a fixed lease is
// checked by the watchdog, not renewed: its expiry stays where it was set,
// and when another process gives it back by its id, the holder's permit
// context ends at the next check, not when its lease (a minute) runs out.
func TestPermitSemaphoreFixedLeaseLossNoticed(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const timeout = 600 * time.Millisecond // checked every 200 ms
	rdb, probe := probeScripts(t, name)
	hs := mustPermitSemaphore(t, newClient(t, rdb, WithWatchdogTimeout(timeout)), name, WithPermitLease(time.Minute))
	other := mustPermitSemaphore(t, newClient(t, nil), name)
	if _, err := other.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := hs.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	set := permitScore(ctx, t, hs, p)
	// Two of the watchdog's script calls: it has visited the permit.
	probe.drain()
	recv(t, probe.replies, 10*time.Second, "the watchdog's first check")
	recv(t, probe.replies, 10*time.Second, "the watchdog's second check")
	if score := permitScore(ctx, t, hs, p); score != set {
		t.Fatalf("fixed-lease permit's expiry moved from %v to %v: the watchdog renewed it", set, score)
	}
	if p.Err() != nil {
		t.Fatalf("fixed-lease permit lost while held: %v", context.Cause(p))
	}
	id, _ := hs.PermitID(p)
	taken := time.Now()
	if err := other.ReleaseID(ctx, id); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, p, 10*time.Second, "the context of a fixed-lease permit given back by its id")
	d := time.Since(taken)
	cause := context.Cause(p)
	t.Logf("fixed-lease permit context ended %v after its permit was given back: %v", d, cause)
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "reclaimed or deleted") {
		t.Errorf("permit context ended with %v; want ErrLockLost from the watchdog's check", cause)
	}
	if d >= 2*timeout {
		t.Errorf("permit context ended %v after the permit was given back; want it at the next check (every %v)", d, timeout/3)
	}
	if err := hs.Release(p); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of a permit given back by id: %v, want ErrNotHeld", err)
	}
}

// holdLease is a go-redis hook that, once armed, holds back the next
// psem_lease script call before it is sent until it is let go, and then
// sends it whatever its ctx says (a command slow on the wire).
type holdLease struct {
	armed  atomic.Bool
	caught chan struct{} // a call is held back
	letGo  chan struct{} // closed to send it
	sent   chan []any    // the arguments of each psem_lease call, once answered
}

func newHoldLease() *holdLease {
	return &holdLease{caught: make(chan struct{}, 1), letGo: make(chan struct{}), sent: make(chan []any, 64)}
}

func (h *holdLease) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdLease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 || strings.ToLower(cmd.Name()) != "evalsha" || args[1] != scripts.PsemLease.Hash() {
			return next(ctx, cmd)
		}
		if h.armed.CompareAndSwap(true, false) {
			h.caught <- struct{}{}
			<-h.letGo
			ctx = context.WithoutCancel(ctx)
		}
		err := next(ctx, cmd)
		select {
		case h.sent <- args:
		default:
		}
		return err
	}
}

func (h *holdLease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestPermitSemaphoreUpdateLeaseDuringRenewal: UpdateLease to a fixed
// lease while the watchdog's renewal of the permit is on its way waits for
// that renewal, so that the renewal cannot set the watchdog lease over the
// fixed one; the watchdog's later visits only check the permit.
func TestPermitSemaphoreUpdateLeaseDuringRenewal(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const timeout = 3 * time.Second // renewed every second
	const fixed = time.Minute
	hook := newHoldLease()
	rdb := newRedis(t)
	rdb.AddHook(hook)
	hs := mustPermitSemaphore(t, newClient(t, rdb, WithWatchdogTimeout(timeout)), name)
	if _, err := hs.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := hs.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	recv(t, hook.caught, 10*time.Second, "the watchdog's renewal of the permit")
	before := time.Now()
	updated := make(chan error, 1)
	go func() { updated <- hs.UpdateLease(p, fixed) }()
	// UpdateLease must wait for the renewal; give it the time to go
	// first if it does not.
	select {
	case err := <-updated:
		t.Errorf("UpdateLease returned (%v) while a renewal of its permit was on its way", err)
		updated <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(hook.letGo)
	if err := recv(t, updated, 10*time.Second, "UpdateLease"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	wantFixed := func(when string) {
		t.Helper()
		score := permitScore(ctx, t, hs, p)
		lo, hi := float64(before.Add(fixed).UnixMilli()), float64(after.Add(fixed).UnixMilli())
		if score < lo || score > hi {
			t.Fatalf("%s: permit expires %v from now, not the fixed %v UpdateLease set", when,
				time.Until(time.UnixMilli(int64(math.Round(score)))).Round(time.Millisecond), fixed)
		}
	}
	wantFixed("after UpdateLease")
	// The watchdog's next visit checks the permit and leaves its lease.
	// (EVALSHA, sha, 3, the keys, now, publish, expiry, ids: expiry 0 is
	// a check.)
	for {
		args := recv(t, hook.sent, 10*time.Second, "the watchdog's next visit of the permit")
		if len(args) > 9 && args[8] == int64(0) {
			break
		}
	}
	wantFixed("after the watchdog's next visit")
	if p.Err() != nil {
		t.Fatalf("permit lost: %v", context.Cause(p))
	}
	if err := hs.Release(p); err != nil {
		t.Fatal(err)
	}
}
