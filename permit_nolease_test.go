package dlock

import (
	"context"
	"encoding/hex"
	"errors"
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
