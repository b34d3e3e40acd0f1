package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RSemaphore's scripts from Redisson HEAD that dlock's Semaphore gained in
// issue 27: trySetPermits(permits, timeToLive) (3.29.0+) and
// releaseIfExists (4.0.0+).
var (
	// KEYS name, channel; ARGV permits, publish, ttl ms.
	javaSemTrySetTTL = redis.NewScript("local value = redis.call('get', KEYS[1]); " +
		"if (value == false) then " +
		"redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3]); " +
		"redis.call(ARGV[2], KEYS[2], ARGV[1]); " +
		"return 1;" +
		"end;" +
		"return 0;")
	// KEYS name, channel; ARGV permits, publish.
	javaSemReleaseIfExists = redis.NewScript("if redis.call('exists', KEYS[1]) == 0 then " +
		"return 0 " +
		"end " +
		"local value = redis.call('incrby', KEYS[1], ARGV[1]) " +
		"redis.call(ARGV[2], KEYS[2], value) " +
		"return 1 ")
)

func (j javaSync) semTrySetTTL(ctx context.Context, n int, ttl time.Duration) (bool, error) {
	v, err := javaSemTrySetTTL.Run(ctx, j.rdb, []string{j.name, j.semChannel()}, n, j.publish, ttl.Milliseconds()).Int()
	return v == 1, err
}

func (j javaSync) semReleaseIfExists(ctx context.Context, n int) (bool, error) {
	v, err := javaSemReleaseIfExists.Run(ctx, j.rdb, []string{j.name, j.semChannel()}, n, j.publish).Int()
	return v == 1, err
}

// TestSemaphoreZeroPermits: Redisson's zero rules. Acquire(0) and
// TryAcquire(0) succeed and Release(0) does nothing, without a command,
// also on a semaphore that was never set; ReleaseIfExists(0) reports
// false; a negative count is refused.
func TestSemaphoreZeroPermits(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	s := mustSemaphore(t, newClient(t, nil), lockName(t))
	if err := s.Acquire(ctx, 0); err != nil {
		t.Errorf("Acquire(0) on an unset semaphore: %v, want nil", err)
	}
	if ok, err := s.TryAcquire(ctx, 0); !ok || err != nil {
		t.Errorf("TryAcquire(0) = %v, %v; want true", ok, err)
	}
	if err := s.Release(ctx, 0); err != nil {
		t.Errorf("Release(0): %v", err)
	}
	if ok, err := s.ReleaseIfExists(ctx, 0); ok || err != nil {
		t.Errorf("ReleaseIfExists(0) = %v, %v; want false", ok, err)
	}
	if n, err := s.c.rdb.Exists(ctx, s.name).Result(); n != 0 || err != nil {
		t.Errorf("zero-permit calls created the semaphore (%d, %v)", n, err)
	}
	if err := s.Acquire(ctx, -1); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Acquire(-1): %v, want ErrInvalidOption", err)
	}
	if _, err := s.ReleaseIfExists(ctx, -1); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("ReleaseIfExists(-1): %v, want ErrInvalidOption", err)
	}
}

// TestSemaphoreTTL: TrySetPermitsWithTTL sets permits that Redis deletes
// after the ttl, and only on a semaphore not set yet; Expire, TTL and
// ClearExpire read and change the time to live; ReleaseIfExists does not
// bring back a semaphore that expired, where Release would.
func TestSemaphoreTTL(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	s := mustSemaphore(t, newClient(t, nil), lockName(t))
	if ok, err := s.Expire(ctx, time.Minute); ok || err != nil {
		t.Errorf("Expire on a missing semaphore = %v, %v; want false", ok, err)
	}
	if d, err := s.TTL(ctx); d != 0 || err != nil {
		t.Errorf("TTL of a missing semaphore = %v, %v; want 0", d, err)
	}
	const ttl = 10 * time.Second
	if ok, err := s.TrySetPermitsWithTTL(ctx, 3, ttl); !ok || err != nil {
		t.Fatalf("TrySetPermitsWithTTL = %v, %v", ok, err)
	}
	wantPermits(t, s, 3)
	if d, err := s.TTL(ctx); d <= 0 || d > ttl || err != nil {
		t.Errorf("TTL = %v, %v; want in (0, %v]", d, err, ttl)
	}
	if ok, err := s.TrySetPermitsWithTTL(ctx, 5, ttl); ok || err != nil {
		t.Errorf("a second TrySetPermitsWithTTL = %v, %v; want false", ok, err)
	}
	wantPermits(t, s, 3)
	if ok, err := s.ReleaseIfExists(ctx, 2); !ok || err != nil {
		t.Fatalf("ReleaseIfExists on a set semaphore = %v, %v", ok, err)
	}
	wantPermits(t, s, 5)
	if ok, err := s.ClearExpire(ctx); !ok || err != nil {
		t.Errorf("ClearExpire = %v, %v; want true", ok, err)
	}
	if d, err := s.TTL(ctx); d != 0 || err != nil {
		t.Errorf("TTL after ClearExpire = %v, %v; want 0", d, err)
	}
	if ok, err := s.ClearExpire(ctx); ok || err != nil {
		t.Errorf("a second ClearExpire = %v, %v; want false", ok, err)
	}
	if ok, err := s.Expire(ctx, 50*time.Millisecond); !ok || err != nil {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	eventually(t, 10*time.Second, func() error {
		if n, err := s.c.rdb.Exists(ctx, s.name).Result(); n != 0 || err != nil {
			return fmt.Errorf("the semaphore has not expired (%d, %v)", n, err)
		}
		return nil
	})
	if ok, err := s.ReleaseIfExists(ctx, 1); ok || err != nil {
		t.Errorf("ReleaseIfExists on an expired semaphore = %v, %v; want false", ok, err)
	}
	if n, err := s.c.rdb.Exists(ctx, s.name).Result(); n != 0 || err != nil {
		t.Errorf("ReleaseIfExists brought back an expired semaphore (%d, %v)", n, err)
	}
	if ok, err := s.TrySetPermitsWithTTL(ctx, 1, 30*time.Millisecond); !ok || err != nil {
		t.Fatalf("TrySetPermitsWithTTL = %v, %v", ok, err)
	}
	eventually(t, 10*time.Second, func() error {
		if n, err := s.AvailablePermits(ctx); n != 0 || err != nil {
			return fmt.Errorf("%d permits left after the ttl (%v)", n, err)
		}
		return nil
	})
	for _, bad := range []error{
		func() error { _, err := s.TrySetPermitsWithTTL(ctx, 1, 0); return err }(),
		func() error { _, err := s.TrySetPermitsWithTTL(ctx, -1, time.Second); return err }(),
		func() error { _, err := s.Expire(ctx, 0); return err }(),
	} {
		if !errors.Is(bad, ErrInvalidOption) {
			t.Errorf("bad input: %v, want ErrInvalidOption", bad)
		}
	}
}

// TestSemaphoreParityRedissonInterop: Redisson's trySetPermits with a ttl
// and releaseIfExists and dlock's agree on the wire: each side's call wakes
// the other side's waiter by its message (the new count), sets a TTL the
// other reads, and leaves a missing semaphore missing.
func TestSemaphoreParityRedissonInterop(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb, c, name := newRedis(t), newClient(t, nil), lockName(t)
	java := newJavaSync(rdb, name)
	s := mustSemaphore(t, c, name)

	// Both sides' releaseIfExists leave a missing semaphore missing.
	if ok, err := java.semReleaseIfExists(ctx, 1); ok || err != nil {
		t.Fatalf("Java releaseIfExists on a missing semaphore: %v %v", ok, err)
	}
	if ok, err := s.ReleaseIfExists(ctx, 1); ok || err != nil {
		t.Fatalf("Go ReleaseIfExists on a missing semaphore: %v %v", ok, err)
	}

	// Java trySetPermits(0, ttl) -> Go reads the TTL; Java releaseIfExists
	// wakes a Go waiter.
	if ok, err := java.semTrySetTTL(ctx, 0, time.Minute); !ok || err != nil {
		t.Fatalf("Java trySetPermits(0, ttl): %v %v", ok, err)
	}
	if d, err := s.TTL(ctx); d <= 0 || d > time.Minute || err != nil {
		t.Errorf("Go TTL after Java's trySetPermits(ttl) = %v, %v", d, err)
	}
	if ok, err := s.TrySetPermitsWithTTL(ctx, 4, time.Minute); ok || err != nil {
		t.Errorf("Go TrySetPermitsWithTTL on a set semaphore = %v, %v; want false", ok, err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if err := s.Acquire(ctx, 1); err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
	}()
	waitForSyncWaiters(t, c, s.channel, 1)
	released := time.Now()
	if ok, err := java.semReleaseIfExists(ctx, 1); !ok || err != nil {
		t.Fatalf("Java releaseIfExists: %v %v", ok, err)
	}
	at := recv(t, got, 10*time.Second, "Go waiter after Java's releaseIfExists")
	if at.IsZero() {
		t.FailNow()
	}
	if d := at.Sub(released); d >= pushBound {
		t.Errorf("Go waiter took %v after Java's releaseIfExists: woken by its poll, not the message", d)
	}

	// Go ReleaseIfExists -> a Java waiter, with the new count.
	jw := startJavaWaiter(t, java, java.semChannel(), func(ctx context.Context) (bool, error) {
		return java.semTryAcquire(ctx, 1)
	})
	released = time.Now()
	if ok, err := s.ReleaseIfExists(ctx, 1); !ok || err != nil {
		t.Fatalf("Go ReleaseIfExists: %v %v", ok, err)
	}
	t.Logf("Java waiter woken %v after Go's ReleaseIfExists", jw.wokeWithin(t, released))
	if msgs := jw.messages(); len(msgs) != 1 || msgs[0] != "1" {
		t.Errorf("Java waiter heard %v, want [1] (the new count)", msgs)
	}

	// Go TrySetPermitsWithTTL -> a Java waiter on a fresh semaphore, and
	// Java reads the TTL.
	if _, err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	jw = startJavaWaiter(t, java, java.semChannel(), func(ctx context.Context) (bool, error) {
		return java.semTryAcquire(ctx, 1)
	})
	released = time.Now()
	if ok, err := s.TrySetPermitsWithTTL(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("Go TrySetPermitsWithTTL: %v %v", ok, err)
	}
	t.Logf("Java waiter woken %v after Go's TrySetPermitsWithTTL", jw.wokeWithin(t, released))
	if msgs := jw.messages(); len(msgs) != 1 || msgs[0] != "2" {
		t.Errorf("Java waiter heard %v, want [2] (the permits set)", msgs)
	}
	if d, err := rdb.PTTL(ctx, name).Result(); d <= 0 || d > time.Minute || err != nil {
		t.Errorf("Java's remainTimeToLive after Go's TrySetPermitsWithTTL = %v, %v", d, err)
	}
	if ok, err := java.semTrySetTTL(ctx, 9, time.Minute); ok || err != nil {
		t.Errorf("Java trySetPermits(ttl) on a set semaphore = %v, %v; want false", ok, err)
	}
	wantPermits(t, s, 1)
}
