package dlock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFixedLeaseLossNoticed: a hold with a fixed lease whose key is
// deleted by hand (or by a ForceUnlock elsewhere) is noticed at the
// watchdog's next check, not at the end of its lease: its lock context is
// cancelled with ErrLockLost.
func TestFixedLeaseLossNoticed(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	c := newClient(t, nil, WithWatchdogTimeout(300*time.Millisecond)) // checks every 100 ms
	for _, mk := range []func(name string) Locker{
		func(name string) Locker { return mustMutex(t, c, name, WithLease(time.Minute)) },
		func(name string) Locker { return mustFair(t, c, name, WithLease(time.Minute)) },
		func(name string) Locker { return mustRW(t, c, name, WithLease(time.Minute)).WriteLock() },
		func(name string) Locker { return mustRW(t, c, name, WithLease(time.Minute)).ReadLock() },
	} {
		name := lockName(t) + ":" + strconv.Itoa(int(time.Now().UnixNano()%1e6))
		l := mk(name)
		lctx := mustLock(t, ctx, l)
		if err := admin.Del(ctx, name).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lctx.Done():
			if !errors.Is(context.Cause(lctx), ErrLockLost) {
				t.Errorf("%T: cause %v, want ErrLockLost", l, context.Cause(lctx))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%T: a deleted hold with a fixed lease went unnoticed for 5 s", l)
		}
		if err := l.Unlock(lctx); !errors.Is(err, ErrNotHeld) {
			t.Errorf("%T: Unlock of a lost hold: %v, want ErrNotHeld", l, err)
		}
		admin.Del(ctx, holdKeyPrefix(name, "x")) // nothing else to clean: the read hold key expires
	}
}

// javaReadRenewal is the read-lock renewal of Redisson's ReadLockTask
// (HEAD): it renews the given owners' hold keys and sets the lock hash's
// TTL to the Java client's lease, shorter maybe than a dlock reader's.
var javaReadRenewal = redis.NewScript(`
local result = {}
local argIdx = 2
for i = 1, #KEYS, 2 do
  local anyAlive = false
  local lockNamesCount = tonumber(ARGV[argIdx])
  argIdx = argIdx + 1
  for k = 1, lockNamesCount do
    local counter = redis.call('hget', KEYS[i], ARGV[argIdx])
    if (counter ~= false) then
      anyAlive = true
      for c = counter, 1, -1 do
        redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1])
      end
    end
    argIdx = argIdx + 1
  end
  if (anyAlive) then
    redis.call('pexpire', KEYS[i], ARGV[1])
    table.insert(result, 1)
  else
    table.insert(result, 0)
  end
end
return result`)

// javaWriteAcquire is Redisson's write-lock acquire script (HEAD): nil
// when the write lock was taken, else the hash's PTTL.
var javaWriteAcquire = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if (mode == 'write') then
  if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local currentExpire = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], currentExpire + ARGV[1])
    return nil
  end
end
return redis.call('pttl', KEYS[1])`)

// TestJavaReadRenewalCannotShortenReadHold is redisson.md §8.1: a dlock
// reader with a long fixed lease, a Java reader beside it whose renewal
// sets the hash's TTL to its own 1.5 s and which then dies. Redis must
// not let the hash expire under the dlock reader: its watchdog check keeps
// the hash as long as its hold, and a Java writer is refused.
func TestJavaReadRenewalCannotShortenReadHold(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	name := lockName(t)
	c := newClient(t, nil, WithWatchdogTimeout(300*time.Millisecond)) // checks every 100 ms
	r := mustRW(t, c, name, WithLease(10*time.Minute)).ReadLock()
	lctx := mustLock(t, ctx, r)

	const java = "java-uuid:1"
	const javaLease = 1500                                       // ms
	if err := admin.HSet(ctx, name, java, 1).Err(); err != nil { // a Java read hold
		t.Fatal(err)
	}
	if err := admin.Set(ctx, hashTag(name)+":"+java+":rwlock_timeout:1", 1, javaLease*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	renewed, err := javaReadRenewal.Run(ctx, admin, []string{name, hashTag(name)}, javaLease, 1, java).Int64Slice()
	if err != nil || len(renewed) != 1 || renewed[0] != 1 {
		t.Fatalf("Java renewal: %v, %v", renewed, err)
	}
	// The Java reader dies: no more renewals. Wait past its lease.
	time.Sleep(2 * javaLease * time.Millisecond)

	if d, err := admin.PTTL(ctx, name).Result(); err != nil || d < time.Minute {
		t.Errorf("lock hash PTTL %v (%v) while a dlock read hold has ~10 min left", d, err)
	}
	// The script answers nil (redis.Nil) when it took the write lock, and
	// the hash's PTTL when it refused.
	switch _, err := javaWriteAcquire.Run(ctx, admin, []string{name}, 30000, "java-writer:1:write").Result(); {
	case errors.Is(err, redis.Nil):
		t.Fatal("a Java writer took the write lock while a dlock read hold was live")
	case err != nil:
		t.Fatal(err)
	}
	if lctx.Err() != nil {
		t.Errorf("read lock context ended: %v", context.Cause(lctx))
	}
	if err := r.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
}
