package dlock

// Tests of the PermitSemaphore calls of Redisson's RPermitExpirableSemaphore
// that issue 27 item 3 added last: the release of an expired permit fails
// as Java's does, the total count (getPermits), and a lease set by id
// (updateLeaseTime), each beside a simulated Java client running Redisson
// HEAD's scripts on the same keys.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// expirePermit makes the permit id (hex) look expired to the scripts
// without reclaiming it: its score goes an hour into the past, as a Java
// client whose clock is behind would have written it.
func expirePermit(ctx context.Context, t *testing.T, rdb redis.UniversalClient, s *PermitSemaphore, id string) {
	t.Helper()
	past := float64(time.Now().Add(-time.Hour).UnixMilli())
	if err := rdb.ZAddXX(ctx, s.timeouts, redis.Z{Score: past, Member: string(mustHex(t, id))}).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestPermitSemaphoreReleaseExpired: a permit that expired but that no
// script reclaimed yet goes back to the pool when released, and Release
// and ReleaseID fail with ErrNotHeld, as Java's release throws (its
// tryRelease answers false); the Java client's tryRelease of a Go permit
// that expired answers false too.
func TestPermitSemaphoreReleaseExpired(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	s := mustPermitSemaphore(t, newClient(t, rdb), name, WithPermitLease(time.Minute))
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	java := newJavaSync(rdb, name)

	// Release(permitCtx) of an expired permit.
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := s.PermitID(p)
	expirePermit(ctx, t, rdb, s, id)
	if err := s.Release(p); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release of an expired permit: %v, want ErrNotHeld", err)
	}
	wantEnded(t, p, ErrLockLost)
	if n, err := rdb.ZCard(ctx, s.timeouts).Result(); n != 0 || err != nil {
		t.Fatalf("permits held after the release of an expired one: %d %v", n, err)
	}

	// ReleaseID of an expired Java permit.
	jid, _, err := java.psemTryAcquire(ctx, time.Minute)
	if err != nil || jid == "" {
		t.Fatalf("Java tryAcquire: %q %v", jid, err)
	}
	expirePermit(ctx, t, rdb, s, jid)
	if err := s.ReleaseID(ctx, jid); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("ReleaseID of an expired Java permit: %v, want ErrNotHeld", err)
	}

	// Java's tryRelease of an expired Go permit answers false.
	p, err = s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ = s.PermitID(p)
	expirePermit(ctx, t, rdb, s, id)
	if ok, err := java.psemRelease(ctx, id); ok || err != nil {
		t.Fatalf("Java tryRelease of an expired Go permit: %v %v, want false", ok, err)
	}
	// Every permit is back in the pool, none reclaimed twice.
	wantAvailable(t, s, 3, 0)

	// A live permit still releases without error.
	p, err = s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(p); err != nil {
		t.Fatalf("Release of a live permit: %v", err)
	}
	wantAvailable(t, s, 3, 0)
}

// The scripts of Redisson HEAD's RPermitExpirableSemaphore for getPermits
// and updateLeaseTime, with their KEYS and ARGV in Redisson's order (see
// synchronizer_test.go for the others). Both reclaim first, on the Java
// client's clock.
var (
	// getPermits: KEYS name, timeout zset, channel; ARGV now, publish.
	javaPsemGetPermits = redis.NewScript(javaPsemReclaimAll("ARGV[1]", "ARGV[2]") +
		"local available = redis.call('get', KEYS[1]); " +
		"if available == false then return 0 end; " +
		"local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); " +
		"if acquired == false then return tonumber(available) end; " +
		"return tonumber(available) + acquired;")
	// updateLeaseTime(id, lease): KEYS name, timeout zset, channel; ARGV
	// id, timeoutDate (now+lease, or the no-expiry score), now, publish.
	javaPsemUpdateLease = redis.NewScript(javaPsemReclaimAll("ARGV[3]", "ARGV[4]") +
		"local value = redis.call('zscore', KEYS[2], ARGV[1]); " +
		"if (value ~= false) then " +
		"redis.call('zadd', KEYS[2], ARGV[2], ARGV[1]); " +
		"return 1; " +
		"end; " +
		"return 0;")
)

// javaPsemReclaimAll is the reclaim step Redisson's scripts start with,
// the caller's clock in the argument now, the publish command in publish.
func javaPsemReclaimAll(now, publish string) string {
	return "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, " + now + ", 'limit', 0, -1); " +
		"if #expiredIds > 0 then " +
		"redis.call('zrem', KEYS[2], unpack(expiredIds)); " +
		"local value = redis.call('incrby', KEYS[1], #expiredIds); " +
		"if tonumber(value) > 0 then " +
		"redis.call(" + publish + ", KEYS[3], value); " +
		"end; " +
		"end; "
}

func (j javaSync) psemGetPermits(ctx context.Context) (int, error) {
	return javaPsemGetPermits.Run(ctx, j.rdb, []string{j.name, j.timeoutKey(), j.semChannel()},
		time.Now().UnixMilli(), j.publish).Int()
}

// psemUpdateLease is updateLeaseTime(hexID, lease); lease < 0: none.
func (j javaSync) psemUpdateLease(ctx context.Context, hexID string, lease time.Duration) (bool, error) {
	raw, err := hex.DecodeString(hexID)
	if err != nil {
		return false, err
	}
	now := time.Now().UnixMilli()
	timeout := javaNonExpirable
	if lease >= 0 {
		timeout = strconv.FormatInt(now+lease.Milliseconds(), 10)
	}
	v, err := javaPsemUpdateLease.Run(ctx, j.rdb, []string{j.name, j.timeoutKey(), j.semChannel()},
		raw, timeout, now, j.publish).Int()
	return v == 1, err
}

// TestPermitSemaphoreTotalPermits: TotalPermits is Redisson's getPermits,
// available plus held after the reclaim step, 0 for a semaphore never
// set; Go and the Java client agree with permits of both held.
func TestPermitSemaphoreTotalPermits(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	s := mustPermitSemaphore(t, newClient(t, rdb), name, WithPermitLease(time.Minute))
	java := newJavaSync(rdb, name)
	both := func(want int) {
		t.Helper()
		if n, err := s.TotalPermits(ctx); n != want || err != nil {
			t.Fatalf("TotalPermits: %d %v, want %d", n, err, want)
		}
		if n, err := java.psemGetPermits(ctx); n != want || err != nil {
			t.Fatalf("Java getPermits: %d %v, want %d", n, err, want)
		}
	}
	both(0) // never set
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jid, _, err := java.psemTryAcquire(ctx, time.Minute)
	if err != nil || jid == "" {
		t.Fatalf("Java tryAcquire: %q %v", jid, err)
	}
	both(3)
	if n, err := s.AvailablePermits(ctx); n != 1 || err != nil {
		t.Fatalf("AvailablePermits: %d %v, want 1", n, err)
	}
	if err := s.AddPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	both(5)
	expirePermit(ctx, t, rdb, s, jid) // reclaimed: back in the pool
	both(5)
	wantAvailable(t, s, 4, 1)
	if err := s.Release(p); err != nil {
		t.Fatal(err)
	}
	both(5)
}

// TestPermitSemaphoreUpdateLeaseByID: UpdateLeaseByID is Redisson's
// updateLeaseTime(id, lease): it leases a Java permit anew, or takes its
// lease away (the no-expiry score, byte for byte), and Java's does the
// same to a Go permit; an id not held (an expired one is reclaimed first)
// fails with ErrNotHeld, where Java answers false.
func TestPermitSemaphoreUpdateLeaseByID(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	s := mustPermitSemaphore(t, newClient(t, rdb), name, WithPermitLease(time.Minute))
	java := newJavaSync(rdb, name)
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	leaseIn := func(id string, lo, hi time.Duration) {
		t.Helper()
		if d, err := s.LeaseTime(ctx, id); err != nil || d <= lo || d > hi {
			t.Fatalf("LeaseTime(%s): %v %v, want (%v, %v]", id, d, err, lo, hi)
		}
	}

	jid, _, err := java.psemTryAcquire(ctx, time.Minute)
	if err != nil || jid == "" {
		t.Fatalf("Java tryAcquire: %q %v", jid, err)
	}
	if err := s.UpdateLeaseByID(ctx, jid, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	leaseIn(jid, 9*time.Minute, 10*time.Minute)
	if err := s.UpdateLeaseByID(ctx, jid, NoPermitLease); err != nil {
		t.Fatal(err)
	}
	if sc, err := rdb.ZScore(ctx, s.timeouts, string(mustHex(t, jid))).Result(); err != nil || formatScore(sc) != javaNonExpirable {
		t.Fatalf("score of a Java permit without lease set by Go: %v %v, want %s", formatScore(sc), err, javaNonExpirable)
	}
	if d, err := s.LeaseTime(ctx, jid); d != NoPermitLease || err != nil {
		t.Fatalf("LeaseTime after UpdateLeaseByID(NoPermitLease): %v %v", d, err)
	}

	// Java relets a Go permit by the id Go shows.
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := s.PermitID(p)
	if ok, err := java.psemUpdateLease(ctx, id, 2*time.Minute); !ok || err != nil {
		t.Fatalf("Java updateLeaseTime of a Go permit: %v %v", ok, err)
	}
	leaseIn(id, 90*time.Second, 2*time.Minute+time.Second)

	// Not held: released, expired (reclaimed first), never taken.
	if ok, err := java.psemRelease(ctx, jid); !ok || err != nil {
		t.Fatalf("Java release: %v %v", ok, err)
	}
	if err := s.UpdateLeaseByID(ctx, jid, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("UpdateLeaseByID of a released permit: %v, want ErrNotHeld", err)
	}
	expirePermit(ctx, t, rdb, s, id)
	if err := s.UpdateLeaseByID(ctx, id, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("UpdateLeaseByID of an expired permit: %v, want ErrNotHeld", err)
	}
	wantAvailable(t, s, 3, 0)
	if ok, err := java.psemUpdateLease(ctx, id, time.Minute); ok || err != nil {
		t.Fatalf("Java updateLeaseTime of a reclaimed permit: %v %v, want false", ok, err)
	}
	for _, bad := range []time.Duration{0, -2, time.Microsecond, MaxLease + 1} {
		if err := s.UpdateLeaseByID(ctx, id, bad); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("UpdateLeaseByID(%v): %v, want ErrInvalidOption", bad, err)
		}
	}
	if err := s.UpdateLeaseByID(ctx, "xyz", time.Minute); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("UpdateLeaseByID of a bad id: %v", err)
	}
}

// Redisson HEAD's tryRelease(list) (all-or-nothing since 3.41.0, see
// ../shared/reference/redisson.md): KEYS name, channel, timeout zset; ARGV
// count, now, publish, ids (raw bytes). Any id missing or expired: 0 and
// nothing changes; else reclaim, give them back, publish their number.
var javaPsemTryReleaseList = redis.NewScript("for i = 4, #ARGV, 1 do " +
	"local expire = redis.call('zscore', KEYS[3], ARGV[i]); " +
	"if expire == false or tonumber(expire) <= tonumber(ARGV[2]) then return 0; end; " +
	"end; " +
	"local expiredIds = redis.call('zrangebyscore', KEYS[3], 0, ARGV[2], 'limit', 0, -1); " +
	"if #expiredIds > 0 then " +
	"redis.call('zrem', KEYS[3], unpack(expiredIds)); " +
	"local value = redis.call('incrby', KEYS[1], #expiredIds); " +
	"if tonumber(value) > 0 then redis.call(ARGV[3], KEYS[2], value); end; " +
	"end; " +
	"local keys = {}; " +
	"for i = 4, #ARGV, 1 do table.insert(keys, ARGV[i]); end; " +
	"local removed = redis.call('zrem', KEYS[3], unpack(keys)); " +
	"redis.call('incrby', KEYS[1], removed); " +
	"redis.call(ARGV[3], KEYS[2], removed); " +
	"return removed;")

// psemTryAcquireN is Redisson's tryAcquire(n) with a lease: n fresh ids,
// returned as hex when taken (nil when not).
func (j javaSync) psemTryAcquireN(ctx context.Context, n int, lease time.Duration) ([]string, error) {
	now := time.Now().UnixMilli()
	args := []any{n, strconv.FormatInt(now+lease.Milliseconds(), 10), now, javaNonExpirable, j.publish}
	var ids []string
	for range n {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		args = append(args, raw)
		ids = append(ids, hex.EncodeToString(raw))
	}
	res, err := javaPsemTryAcquire.Run(ctx, j.rdb, []string{j.name, j.timeoutKey(), j.semChannel()}, args...).Text()
	if errors.Is(err, redis.Nil) || err == nil && res != "OK" {
		return nil, nil
	}
	return ids, err
}

// psemTryReleaseList is tryRelease(list): how many were released.
func (j javaSync) psemTryReleaseList(ctx context.Context, hexIDs []string) (int, error) {
	args := []any{len(hexIDs), time.Now().UnixMilli(), j.publish}
	for _, id := range hexIDs {
		raw, err := hex.DecodeString(id)
		if err != nil {
			return 0, err
		}
		args = append(args, raw)
	}
	return javaPsemTryReleaseList.Run(ctx, j.rdb, []string{j.name, j.semChannel(), j.timeoutKey()}, args...).Int()
}

// TestPermitSemaphoreManyPermits: TryAcquireN takes n permits or none
// (Redisson's tryAcquire(n)), ReleaseIDs gives back a list all together
// or none (release(list), all-or-nothing since 3.41.0) and wakes a Java
// waiter for several permits with one message; Java's tryRelease(list)
// gives back Go's ids, and an id not held or expired leaves every permit
// of the list held, on both sides.
func TestPermitSemaphoreManyPermits(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	s := mustPermitSemaphore(t, newClient(t, rdb), name)
	java := newJavaSync(rdb, name)
	if ok, err := s.TrySetPermits(ctx, 5); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	goIDs, err := s.TryAcquireN(ctx, 3, time.Minute)
	if err != nil || len(goIDs) != 3 {
		t.Fatalf("TryAcquireN(3): %v %v", goIDs, err)
	}
	for _, id := range goIDs {
		if d, err := s.LeaseTime(ctx, id); err != nil || d <= 50*time.Second || d > time.Minute {
			t.Fatalf("LeaseTime(%s): %v %v", id, d, err)
		}
	}
	if ids, err := s.TryAcquireN(ctx, 3, NoPermitLease); !errors.Is(err, ErrNotObtained) || ids != nil {
		t.Fatalf("TryAcquireN(3) with 2 left: %v %v, want ErrNotObtained", ids, err)
	}
	wantAvailable(t, s, 2, 3) // all or nothing: none taken
	javaIDs, err := java.psemTryAcquireN(ctx, 2, time.Minute)
	if err != nil || len(javaIDs) != 2 {
		t.Fatalf("Java tryAcquire(2): %v %v", javaIDs, err)
	}

	// All or nothing: one id of the list not held, then one expired.
	if err := s.ReleaseIDs(ctx, []string{goIDs[0], "00112233445566778899aabbccddeeff"}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("ReleaseIDs with an id not held: %v, want ErrNotHeld", err)
	}
	wantAvailable(t, s, 0, 5)
	expirePermit(ctx, t, rdb, s, javaIDs[1])
	if err := s.ReleaseIDs(ctx, []string{javaIDs[0], javaIDs[1]}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("ReleaseIDs with an expired id: %v, want ErrNotHeld", err)
	}
	if n, err := java.psemTryReleaseList(ctx, []string{goIDs[0], javaIDs[1]}); n != 0 || err != nil {
		t.Fatalf("Java tryRelease(list) with an expired id: %d %v, want 0", n, err)
	}
	wantAvailable(t, s, 1, 4) // the expired one reclaimed, the others held

	// A Java waiter for 3 permits is woken by Go's release of 3.
	var woke []string
	jw := startJavaWaiter(t, java, java.semChannel(), func(ctx context.Context) (bool, error) {
		ids, err := java.psemTryAcquireN(ctx, 3, time.Minute)
		woke = ids
		return ids != nil, err
	})
	released := time.Now()
	if err := s.ReleaseIDs(ctx, goIDs); err != nil {
		t.Fatal(err)
	}
	d := jw.wokeWithin(t, released)
	t.Logf("Java waiter for 3 took them %v after Go's ReleaseIDs (messages %v)", d, jw.messages())
	if msgs := jw.messages(); len(msgs) != 1 || msgs[0] != "3" {
		t.Errorf("Java waiter heard %v, want [3] (the number released, as Redisson publishes)", msgs)
	}
	// Java gives back a list of Go's ids.
	goIDs, err = s.TryAcquireN(ctx, 1, NoPermitLease)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := java.psemTryReleaseList(ctx, append(goIDs, javaIDs[0])); n != 2 || err != nil {
		t.Fatalf("Java tryRelease(list) of a Go and a Java permit: %d %v, want 2", n, err)
	}
	if err := s.ReleaseIDs(ctx, woke); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 5, 0)

	// Zero and bad input.
	if ids, err := s.TryAcquireN(ctx, 0, time.Minute); ids != nil || err != nil {
		t.Fatalf("TryAcquireN(0): %v %v, want nothing and no error", ids, err)
	}
	for _, bad := range []struct {
		n     int
		lease time.Duration
	}{{-1, time.Minute}, {1, 0}, {1, -2}, {1, MaxLease + 1}} {
		if _, err := s.TryAcquireN(ctx, bad.n, bad.lease); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("TryAcquireN(%d, %v): %v, want ErrInvalidOption", bad.n, bad.lease, err)
		}
	}
	id := "00112233445566778899aabbccddeeff"
	for _, bad := range [][]string{nil, {"xyz"}, {id, id}} {
		if err := s.ReleaseIDs(ctx, bad); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("ReleaseIDs(%v): %v, want ErrInvalidOption", bad, err)
		}
	}
	wantAvailable(t, s, 5, 0)
}

// TestPermitSemaphoreAcquireN: AcquireN waits until n permits are free at
// once, woken by a Java client's release (Redisson's tryRelease publishes
// the new count), not by its poll; it takes none while fewer are free, and
// a ctx that ends first fails with ErrNotObtained.
func TestPermitSemaphoreAcquireN(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb)
	s := mustPermitSemaphore(t, c, name)
	java := newJavaSync(rdb, name)
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	javaIDs, err := java.psemTryAcquireN(ctx, 2, time.Minute)
	if err != nil || len(javaIDs) != 2 {
		t.Fatalf("Java tryAcquire(2): %v %v", javaIDs, err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ids, err := s.AcquireN(short, 2, time.Minute); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || ids != nil {
		t.Fatalf("AcquireN(2) with 1 free until ctx ends: %v %v, want ErrNotObtained and the deadline", ids, err)
	}
	wantAvailable(t, s, 1, 2) // none taken while waiting

	type result struct {
		ids []string
		err error
	}
	got := make(chan result, 1)
	go func() {
		ids, err := s.AcquireN(ctx, 2, NoPermitLease)
		got <- result{ids, err}
	}()
	waitForSyncWaiters(t, c, s.channel, 1)
	released := time.Now()
	if ok, err := java.psemRelease(ctx, javaIDs[0]); !ok || err != nil {
		t.Fatalf("Java release: %v %v", ok, err)
	}
	select {
	case r := <-got:
		if r.err != nil || len(r.ids) != 2 {
			t.Fatalf("AcquireN(2): %v %v", r.ids, r.err)
		}
		if d := time.Since(released); d >= pushBound {
			t.Errorf("AcquireN took %v after the Java release: woken by its poll, not by the message", d)
		}
		wantAvailable(t, s, 0, 3)
		if err := s.ReleaseIDs(ctx, append(r.ids, javaIDs[1])); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireN not woken by the Java release")
	}
	wantAvailable(t, s, 3, 0)
	if ids, err := s.AcquireN(ctx, 0, time.Minute); ids != nil || err != nil {
		t.Fatalf("AcquireN(0): %v %v, want nothing and no error", ids, err)
	}
	if _, err := s.AcquireN(ctx, 1, 0); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("AcquireN with the watchdog lease: %v, want ErrInvalidOption", err)
	}
}
