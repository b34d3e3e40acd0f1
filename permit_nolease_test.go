package dlock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestPermitSemaphoreNoLease: WithPermitLease(NoPermitLease) takes permits
// that never expire, in Redisson's encoding (score 922337203685477): a
// Java client sees no expiry to wait for (its tryAcquire answers nil, not
// ":<score>") and releases the permit by id, which Go notices; UpdateLease
// turns a permit without lease into a leased one and back.
func TestPermitSemaphoreNoLease(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb, WithWatchdogTimeout(time.Second))
	s := mustPermitSemaphore(t, c, name, WithPermitLease(NoPermitLease))
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := s.PermitID(p)
	raw := string(mustHex(t, id))
	score := func() string {
		t.Helper()
		v, err := rdb.ZScore(ctx, s.timeouts, raw).Result()
		if err != nil {
			t.Fatal(err)
		}
		return formatScore(v)
	}
	if got := score(); got != noExpiryScore {
		t.Fatalf("score of a permit without lease: %s, want %s", got, noExpiryScore)
	}
	infos, err := s.Permits(ctx)
	if err != nil || len(infos) != 1 || !infos[0].Expires.IsZero() {
		t.Fatalf("Permits: %+v %v; want one permit without expiry", infos, err)
	}
	java := newJavaSync(rdb, name)
	if jid, nearest, err := java.psemTryAcquire(ctx, time.Minute); jid != "" || nearest != "" || err != nil {
		t.Fatalf("Java tryAcquire beside a permit without lease: %q %q %v; want nil (nothing expires)", jid, nearest, err)
	}
	// Three watchdog intervals: the permit is checked, not renewed, and
	// neither expires nor is cancelled.
	select {
	case <-p.Done():
		t.Fatalf("permit without lease ended: %v", context.Cause(p))
	case <-time.After(3 * time.Second):
	}
	if got := score(); got != noExpiryScore {
		t.Fatalf("score after the watchdog's visits: %s, want %s", got, noExpiryScore)
	}

	if err := s.UpdateLease(p, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := score(); got == noExpiryScore {
		t.Fatal("UpdateLease(1m) left the permit without lease")
	}
	if err := s.UpdateLease(p, NoPermitLease); err != nil {
		t.Fatal(err)
	}
	if got := score(); got != noExpiryScore {
		t.Fatalf("score after UpdateLease(NoPermitLease): %s", got)
	}

	// Java releases it by id; the watchdog's check notices.
	if ok, err := java.psemRelease(ctx, id); !ok || err != nil {
		t.Fatalf("Java tryRelease of a Go permit without lease: %v %v", ok, err)
	}
	awaitDone(t, p, 10*time.Second, "the permit context of a permit Java released")
	if cause := context.Cause(p); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	wantAvailable(t, s, 1, 0)

	if _, err := c.NewPermitSemaphore(name, WithPermitLease(-2)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("WithPermitLease(-2): %v", err)
	}
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// formatScore prints a zset score as Lua and Java read it: an integer.
func formatScore(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// TestPermitSemaphoreLeasePerCall: AcquireWithLease and
// TryAcquireWithLease take a permit with the lease of the call, whatever
// the semaphore's: fixed (its context ends when it runs out), none (the
// no-expiry score), or the watchdog's; a waiter handed a permit gets its
// own lease.
func TestPermitSemaphoreLeasePerCall(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb, WithWatchdogTimeout(3*time.Second))
	s := mustPermitSemaphore(t, c, name, WithPermitLease(time.Hour))
	if ok, err := s.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	score := func(p context.Context) string {
		t.Helper()
		id, _ := s.PermitID(p)
		v, err := rdb.ZScore(ctx, s.timeouts, string(mustHex(t, id))).Result()
		if err != nil {
			t.Fatal(err)
		}
		return formatScore(v)
	}
	expiresIn := func(p context.Context) time.Duration {
		t.Helper()
		ms, err := strconv.ParseInt(score(p), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return time.Until(time.UnixMilli(ms))
	}

	short, err := s.TryAcquireWithLease(ctx, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := expiresIn(short); d > 300*time.Millisecond {
		t.Fatalf("a permit taken with a 300ms lease expires in %v", d)
	}
	awaitDone(t, short, 10*time.Second, "the permit context of a 300ms lease")
	if cause := context.Cause(short); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}

	watched, err := s.AcquireWithLease(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := expiresIn(watched); d > 3*time.Second || d < time.Second {
		t.Fatalf("a permit taken with the watchdog lease (3s) expires in %v", d)
	}
	// The watchdog renews it: it outlives its first lease.
	select {
	case <-watched.Done():
		t.Fatalf("a watchdog permit ended: %v", context.Cause(watched))
	case <-time.After(4 * time.Second):
	}

	forever, err := s.AcquireWithLease(ctx, NoPermitLease)
	if err != nil {
		t.Fatal(err)
	}
	if got := score(forever); got != noExpiryScore {
		t.Fatalf("score of a permit taken with NoPermitLease: %s", got)
	}

	// A waiter for a permit without lease is handed one without lease.
	got := make(chan context.Context, 1)
	go func() {
		p, err := s.AcquireWithLease(ctx, NoPermitLease)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	eventually(t, 10*time.Second, func() error {
		if n := queuedPlaces(c, s); n != 1 {
			return fmt.Errorf("%d waiters queued, want 1", n)
		}
		return nil
	})
	if err := s.Release(watched); err != nil {
		t.Fatal(err)
	}
	handed := recv(t, got, 10*time.Second, "the permit handed over")
	if handed == nil {
		t.FailNow()
	}
	if got := score(handed); got != noExpiryScore {
		t.Fatalf("score of a permit handed to a waiter without lease: %s", got)
	}
	for _, p := range []context.Context{forever, handed} {
		if err := s.Release(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []time.Duration{-2, time.Microsecond, MaxLease + time.Second} {
		if _, err := s.TryAcquireWithLease(ctx, bad); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("TryAcquireWithLease(%v): %v", bad, err)
		}
	}
	wantAvailable(t, s, 2, 0)
}

// TestPermitSemaphoreLeaseTime: LeaseTime tells how long a permit has left
// (Redisson's getLeaseTime), NoPermitLease for one without lease, also a
// Java permit's, and fails with ErrNotHeld for a permit not held.
func TestPermitSemaphoreLeaseTime(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	s := mustPermitSemaphore(t, newClient(t, rdb), name)
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p, err := s.AcquireWithLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := s.PermitID(p)
	if d, err := s.LeaseTime(ctx, id); err != nil || d <= 50*time.Second || d > time.Minute {
		t.Fatalf("LeaseTime of a 1m permit: %v %v", d, err)
	}
	java := newJavaSync(rdb, name)
	jid, _, err := java.psemTryAcquire(ctx, 0) // no lease
	if err != nil || jid == "" {
		t.Fatalf("Java tryAcquire: %q %v", jid, err)
	}
	if d, err := s.LeaseTime(ctx, jid); err != nil || d != NoPermitLease {
		t.Fatalf("LeaseTime of a Java permit without lease: %v %v", d, err)
	}
	if err := s.Release(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LeaseTime(ctx, id); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("LeaseTime of a released permit: %v", err)
	}
	if _, err := s.LeaseTime(ctx, "xyz"); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("LeaseTime of a bad id: %v", err)
	}
	if ok, err := java.psemRelease(ctx, jid); !ok || err != nil {
		t.Fatalf("Java release: %v %v", ok, err)
	}
}
