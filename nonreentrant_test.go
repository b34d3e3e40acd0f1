package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's non-reentrant locks (4.4.0: RedissonNonReentrantLock,
// RedissonNonReentrantFairLock): RLock's and FairLock's acquire scripts
// that answer a re-entry by the holding thread with an error reply instead
// of counting it. Their unlock scripts are RLock's and FairLock's.
const javaReentryErr = "NON_REENTRANT_REACQUIRE"

var (
	// KEYS: lock. ARGV: lease, owner, error text.
	javaNRAcquire = redis.NewScript(`
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  return redis.error_reply(ARGV[3]);
end;
return redis.call('pttl', KEYS[1]);`)

	// KEYS: lock, queue, timeouts. ARGV: lease, owner, wait, now, error
	// text (the EVAL_LONG variant: tryLock's attempts).
	javaNRFairAcquire = redis.NewScript(`
while true do
  local firstThreadId2 = redis.call('lindex', KEYS[2], 0);
  if firstThreadId2 == false then break; end;
  local timeout = redis.call('zscore', KEYS[3], firstThreadId2);
  if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then
    redis.call('zrem', KEYS[3], firstThreadId2);
    redis.call('lpop', KEYS[2]);
  else
    break;
  end;
end;
if (redis.call('exists', KEYS[1]) == 0)
    and ((redis.call('exists', KEYS[2]) == 0) or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then
  redis.call('lpop', KEYS[2]);
  redis.call('zrem', KEYS[3], ARGV[2]);
  local keys = redis.call('zrange', KEYS[3], 0, -1);
  for i = 1, #keys, 1 do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);
  end;
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  return redis.error_reply(ARGV[5]);
end;
local timeout = redis.call('zscore', KEYS[3], ARGV[2]);
if timeout ~= false then
  local ttl = redis.call('pttl', KEYS[1]);
  return math.max(0, ttl);
end;
local lastThreadId = redis.call('lindex', KEYS[2], -1);
local ttl;
if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then
  ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);
else
  ttl = redis.call('pttl', KEYS[1]);
end;
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2]);
end;
return ttl;`)
)

// javaNRAttempt is one tryLock attempt of thread tid on Redisson's
// non-reentrant kind of l (RLock or FairLock): acquired, or the ttl; an
// error for a re-entry (IllegalMonitorStateException).
func javaNRAttempt(ctx context.Context, l *javaLock, tid int) (bool, int64, error) {
	lease := l.jvm.lease.Milliseconds()
	var cmd *redis.Cmd
	if l.kind == javaFairLock {
		cmd = javaNRFairAcquire.Run(ctx, l.jvm.rdb, l.fairKeys(), lease, l.owner(tid), l.wait.Milliseconds(), time.Now().UnixMilli(), javaReentryErr)
	} else {
		cmd = javaNRAcquire.Run(ctx, l.jvm.rdb, []string{l.name}, lease, l.owner(tid), javaReentryErr)
	}
	ttl, err := cmd.Int64()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	return false, ttl, err
}

// TestNonReentrantRedissonInterop: Go locks made WithoutReentry and
// Redisson's non-reentrant locks on one name exclude each other; a Java
// unlock wakes a Go waiter by its message; a Go re-entry is refused with
// ErrNotReentrant as Java's is with its error reply, and the Go hold
// stands against Java until Unlock.
func TestNonReentrantRedissonInterop(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind javaKind
		open func(c *Client, name string) (Locker, error)
	}{
		{"Mutex", javaRLock, func(c *Client, name string) (Locker, error) { return c.NewMutex(name, WithoutReentry()) }},
		{"FairMutex", javaFairLock, func(c *Client, name string) (Locker, error) { return c.NewFairMutex(name, WithoutReentry()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := boundedCtx(t, time.Minute)
			name := lockName(t)
			java := newJVM(t, DefaultWatchdogTimeout).lock(tc.kind, name)
			c := newClient(t, nil)
			l, err := tc.open(c, name)
			if err != nil {
				t.Fatal(err)
			}

			// Java holds: its own re-entry fails; Go is excluded, waits,
			// and is woken by the Java unlock's message.
			if ok, _, err := javaNRAttempt(ctx, java, 1); !ok || err != nil {
				t.Fatalf("Java tryLock: %v, %v", ok, err)
			}
			if _, _, err := javaNRAttempt(ctx, java, 1); err == nil || !strings.Contains(err.Error(), javaReentryErr) {
				t.Fatalf("Java re-entry: %v, want %s", err, javaReentryErr)
			}
			if _, err := l.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("Go TryLock while Java holds: %v, want ErrNotObtained", err)
			}
			got := goWaiter(ctx, l)
			eventually(t, 10*time.Second, func() error {
				if chs, err := c.rdb.PubSubChannels(ctx, java.waiterChannels()).Result(); err != nil || len(chs) == 0 {
					return errors.New("the Go waiter has not subscribed yet")
				}
				return nil
			})
			start := time.Now()
			if _, err := java.unlock(ctx, 1); err != nil {
				t.Fatal(err)
			}
			h := recv(t, got, 10*time.Second, "Go waiter after the Java unlock")
			if h.err != nil {
				t.Fatal(h.err)
			}
			t.Logf("Go waiter took the lock %v after the Java unlock", h.at.Sub(start))
			if d := h.at.Sub(start); d > 5*time.Second {
				t.Errorf("Go waiter took %v: not woken by the Java message", d)
			}
			h.unlock()

			// Go holds: a Go re-entry is refused, Java is excluded until
			// the Go Unlock.
			lc := mustLock(t, ctx, l)
			if _, err := l.Lock(lc); !errors.Is(err, ErrNotReentrant) {
				t.Fatalf("Go re-entry: %v, want ErrNotReentrant", err)
			}
			if ok, ttl, err := javaNRAttempt(ctx, java, 2); ok || err != nil || ttl <= 0 {
				t.Fatalf("Java tryLock while Go holds: %v, ttl %d, %v", ok, ttl, err)
			}
			if err := l.Unlock(lc); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, func() error {
				ok, _, err := javaNRAttempt(ctx, java, 2)
				if !ok || err != nil {
					return errors.New("Java has not taken the lock after the Go Unlock")
				}
				return nil
			})
			if _, err := java.unlock(ctx, 2); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waiterChannels is the pattern of the channels a Go waiter on l's lock
// subscribes to: the lock's, or for a fair lock the waiters' own.
func (l *javaLock) waiterChannels() string {
	if l.kind == javaFairLock {
		return "redisson_lock__channel:" + l.tag() + ":*"
	}
	return "redisson_lock__channel:" + l.tag()
}
