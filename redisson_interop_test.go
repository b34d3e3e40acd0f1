package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file plays Redisson as it is today (redisson/redisson HEAD, as
// described in ../shared/reference/redisson.md §1-§3): its acquire,
// unlock, renewal and abandon scripts for RLock, FairLock and both halves
// of ReadWriteLock, the unlock latch it deletes after the reply, its
// watchdog and its tryLock loop. A javaJVM is one Redisson client: its own
// UUID and go-redis client; a javaThread is one of its threads. The
// interop tests run these beside dlock Clients under contention.

// Redisson's RLock scripts (RedissonLock, RedissonBaseLock).
var (
	// KEYS: lock. ARGV: lease, owner. nil when acquired, else the pttl.
	javaLockAcquire = redis.NewScript(`
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);`)

	// KEYS: lock, channel, latch. ARGV: message 0, lease, owner, publish
	// command, latch lifetime.
	javaLockUnlock = redis.NewScript(`
local val = redis.call('get', KEYS[3]);
if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;`)

	// renewal/LockTask. KEYS: locks. ARGV: lease, then one owner per lock.
	javaLockRenew = redis.NewScript(`
local result = {}
for i = 1, #KEYS, 1 do
  if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then
    redis.call('pexpire', KEYS[i], ARGV[1]);
    table.insert(result, 1);
  else
    table.insert(result, 0);
  end;
end;
return result;`)
)

// Redisson's FairLock scripts (RedissonFairLock): the client's clock
// (ARGV now), a purge of stale heads that always runs and drops a head
// without a score, and the wait (fairLockWaitTimeout, or tryLock's
// waitTime) passed by the caller.
var (
	// KEYS: lock, queue, timeouts. ARGV: lease, owner, wait, now.
	javaFairAcquire = redis.NewScript(`
while true do
  local first = redis.call('lindex', KEYS[2], 0);
  if first == false then break; end;
  local timeout = redis.call('zscore', KEYS[3], first);
  if timeout == false or tonumber(timeout) <= tonumber(ARGV[4]) then
    redis.call('zrem', KEYS[3], first);
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
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]));
end;
local lastThreadId = redis.call('lindex', KEYS[2], -1);
local ttl;
if lastThreadId ~= false and lastThreadId ~= ARGV[2] then
  ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);
else
  ttl = redis.call('pttl', KEYS[1]);
end;
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2]);
end;
return ttl;`)

	// KEYS: lock, queue, timeouts, channel prefix, latch. ARGV: message 0,
	// lease, owner, now, publish command, latch lifetime.
	javaFairUnlock = redis.NewScript(`
local val = redis.call('get', KEYS[5]);
if val ~= false then return tonumber(val); end;
while true do
  local first = redis.call('lindex', KEYS[2], 0);
  if first == false then break; end;
  local timeout = redis.call('zscore', KEYS[3], first);
  if timeout == false or tonumber(timeout) <= tonumber(ARGV[4]) then
    redis.call('zrem', KEYS[3], first);
    redis.call('lpop', KEYS[2]);
  else
    break;
  end;
end;
if (redis.call('exists', KEYS[1]) == 0) then
  local nextThreadId = redis.call('lindex', KEYS[2], 0);
  if nextThreadId ~= false then
    redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]);
  end;
  redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
  return 1;
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[5], 0, 'px', ARGV[6]);
  return 0;
end;
redis.call('del', KEYS[1]);
local nextThreadId = redis.call('lindex', KEYS[2], 0);
if nextThreadId ~= false then
  redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]);
end;
redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
return 1;`)

	// acquireFailed: KEYS: queue, timeouts. ARGV: owner, wait. It
	// publishes nothing.
	javaFairAbandon = redis.NewScript(`
local queue = redis.call('lrange', KEYS[1], 0, -1);
local i = 1;
while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1; end;
i = i + 1;
while i <= #queue do
  redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);
  i = i + 1;
end;
redis.call('zrem', KEYS[2], ARGV[1]);
redis.call('lrem', KEYS[1], 0, ARGV[1]);`)
)

// Redisson's ReadWriteLock scripts (RedissonReadLock, RedissonWriteLock,
// renewal/ReadLockTask).
var (
	// KEYS: lock, timeout prefix {N}:<owner>:rwlock_timeout. ARGV: lease,
	// owner, owner:write.
	javaReadAcquire = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'read');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('set', KEYS[2] .. ':1', 1);
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
  local key = KEYS[2] .. ':' .. ind;
  redis.call('set', key, 1);
  redis.call('pexpire', key, ARGV[1]);
  local remainTime = redis.call('pttl', KEYS[1]);
  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1]));
  return nil;
end;
return redis.call('pttl', KEYS[1]);`)

	// KEYS: lock, channel, timeout prefix, key prefix {N}, latch. ARGV:
	// message 0, owner, publish command, latch lifetime.
	javaReadUnlock = redis.NewScript(`
local val = redis.call('get', KEYS[5]);
if val ~= false then return tonumber(val); end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call(ARGV[3], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
  return 1;
end;
local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
if (lockExists == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;
redis.call('del', KEYS[3] .. ':' .. (counter+1));
if (redis.call('hlen', KEYS[1]) > 1) then
  local maxRemainTime = -3;
  local keys = redis.call('hkeys', KEYS[1]);
  for n, key in ipairs(keys) do
    counter = tonumber(redis.call('hget', KEYS[1], key));
    if type(counter) == 'number' then
      for i=counter, 1, -1 do
        local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
        maxRemainTime = math.max(remainTime, maxRemainTime);
      end;
    end;
  end;
  if maxRemainTime > 0 then
    redis.call('pexpire', KEYS[1], maxRemainTime);
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
    return 0;
  end;
  if mode == 'write' then
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
    return 0;
  end;
end;
redis.call('del', KEYS[1]);
redis.call(ARGV[3], KEYS[2], ARGV[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
return 1;`)

	// KEYS: lock. ARGV: lease, owner:write. Re-entry adds the lease to
	// the remaining TTL.
	javaWriteLockAcquire = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'write');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'write') then
  if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    local currentExpire = redis.call('pttl', KEYS[1]);
    redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]);
    return nil;
  end;
end;
return redis.call('pttl', KEYS[1]);`)

	// KEYS: lock, channel, latch. ARGV: message 1, lease, owner:write,
	// publish command, latch lifetime. Silent when read holds remain.
	javaWriteUnlock = redis.NewScript(`
local val = redis.call('get', KEYS[3]);
if val ~= false then return tonumber(val); end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;
if (mode == 'write') then
  local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);
  if (lockExists == 0) then
    return nil;
  else
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
    if (counter > 0) then
      redis.call('pexpire', KEYS[1], ARGV[2]);
      redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
      return 0;
    else
      redis.call('hdel', KEYS[1], ARGV[3]);
      if (redis.call('hlen', KEYS[1]) == 1) then
        redis.call('del', KEYS[1]);
        redis.call(ARGV[4], KEYS[2], ARGV[1]);
      else
        redis.call('hset', KEYS[1], 'mode', 'read');
      end;
      redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
      return 1;
    end;
  end;
end;
return nil;`)

	// renewal/ReadLockTask. KEYS: pairs of lock, key prefix {N}. ARGV:
	// lease, then per lock the number of owners and the owners. It sets
	// the hash's TTL to its lease whatever the other readers' leases.
	javaReadRenew = redis.NewScript(`
local result = {}
local argIdx = 2
for i = 1, #KEYS, 2 do
  local anyAlive = false;
  local lockNamesCount = tonumber(ARGV[argIdx]);
  argIdx = argIdx + 1;
  for k = 1, lockNamesCount do
    local counter = redis.call('hget', KEYS[i], ARGV[argIdx]);
    if (counter ~= false) then
      anyAlive = true;
      for c=counter, 1, -1 do
        redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]);
      end;
    end;
    argIdx = argIdx + 1;
  end;
  if (anyAlive) then
    redis.call('pexpire', KEYS[i], ARGV[1]);
    table.insert(result, 1);
  else
    table.insert(result, 0);
  end;
end;
return result;`)
)

// javaKind is the Redisson lock class a javaLock plays.
type javaKind int

const (
	javaRLock javaKind = iota
	javaFairLock
	javaReadLock
	javaWriteLock
)

// javaJVM is one Redisson client.
type javaJVM struct {
	rdb   *redis.Client
	id    string        // the client's UUID
	lease time.Duration // lockWatchdogTimeout
}

func newJVM(t testing.TB, lease time.Duration) *javaJVM {
	t.Helper()
	id, err := newUUID()
	if err != nil {
		t.Fatal(err)
	}
	return &javaJVM{rdb: newRedis(t), id: id, lease: lease}
}

// javaLock is one Redisson lock object (getLock, getFairLock,
// getReadWriteLock(...).readLock()/writeLock()) of a JVM.
type javaLock struct {
	jvm  *javaJVM
	kind javaKind
	name string
	wait time.Duration // fair: fairLockWaitTimeout
}

func (j *javaJVM) lock(kind javaKind, name string) *javaLock {
	return &javaLock{jvm: j, kind: kind, name: name, wait: DefaultFairWaitTimeout}
}

// javaLatchTTL is the unlock latch's lifetime: (timeout + retry delay) ×
// retry attempts with Redisson's defaults.
const javaLatchTTL = 16500 * time.Millisecond

func (l *javaLock) owner(tid int) string { return fmt.Sprintf("%s:%d", l.jvm.id, tid) }

// field is the hash field of thread tid's hold.
func (l *javaLock) field(tid int) string {
	if l.kind == javaWriteLock {
		return l.owner(tid) + ":write"
	}
	return l.owner(tid)
}

func (l *javaLock) tag() string { return "{" + l.name + "}" }

// channel is where thread tid waits.
func (l *javaLock) channel(tid int) string {
	switch l.kind {
	case javaFairLock:
		return "redisson_lock__channel:" + l.tag() + ":" + l.owner(tid)
	case javaReadLock, javaWriteLock:
		return "redisson_rwlock:" + l.tag()
	}
	return "redisson_lock__channel:" + l.tag()
}

func (l *javaLock) fairKeys() []string {
	return []string{l.name, "redisson_lock_queue:" + l.tag(), "redisson_lock_timeout:" + l.tag()}
}

func (l *javaLock) timeoutPrefix(tid int) string {
	return l.tag() + ":" + l.owner(tid) + ":rwlock_timeout"
}

// attempt is tryAcquire: acquired, or the ttl Redisson waits at most
// (negative: no bound). wait is the fair lock's wait (tryLock's
// waitTime, or fairLockWaitTimeout).
func (l *javaLock) attempt(ctx context.Context, tid int, lease, wait time.Duration) (bool, int64, error) {
	var cmd *redis.Cmd
	rdb := l.jvm.rdb
	switch l.kind {
	case javaRLock:
		cmd = javaLockAcquire.Run(ctx, rdb, []string{l.name}, lease.Milliseconds(), l.owner(tid))
	case javaFairLock:
		cmd = javaFairAcquire.Run(ctx, rdb, l.fairKeys(), lease.Milliseconds(), l.owner(tid), wait.Milliseconds(), time.Now().UnixMilli())
	case javaReadLock:
		cmd = javaReadAcquire.Run(ctx, rdb, []string{l.name, l.timeoutPrefix(tid)}, lease.Milliseconds(), l.owner(tid), l.owner(tid)+":write")
	case javaWriteLock:
		cmd = javaWriteLockAcquire.Run(ctx, rdb, []string{l.name}, lease.Milliseconds(), l.field(tid))
	}
	ttl, err := cmd.Int64()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	return false, ttl, err
}

// unlock is unlock(): the script with a fresh unlock latch, which the
// client deletes once the reply is in. It returns the script's answer
// (nil: IllegalMonitorStateException).
func (l *javaLock) unlock(ctx context.Context, tid int) (int64, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	latch := "redisson_unlock_latch:" + l.tag() + ":" + hex.EncodeToString(b[:])
	rdb, lease, ttl := l.jvm.rdb, l.jvm.lease.Milliseconds(), javaLatchTTL.Milliseconds()
	var cmd *redis.Cmd
	switch l.kind {
	case javaRLock:
		cmd = javaLockUnlock.Run(ctx, rdb, []string{l.name, l.channel(tid), latch}, 0, lease, l.owner(tid), "publish", ttl)
	case javaFairLock:
		keys := append(l.fairKeys(), "redisson_lock__channel:"+l.tag(), latch)
		cmd = javaFairUnlock.Run(ctx, rdb, keys, 0, lease, l.owner(tid), time.Now().UnixMilli(), "publish", ttl)
	case javaReadLock:
		keys := []string{l.name, l.channel(tid), l.timeoutPrefix(tid), l.tag(), latch}
		cmd = javaReadUnlock.Run(ctx, rdb, keys, 0, l.owner(tid), "publish", ttl)
	case javaWriteLock:
		cmd = javaWriteUnlock.Run(ctx, rdb, []string{l.name, l.channel(tid), latch}, 1, lease, l.field(tid), "publish", ttl)
	}
	n, err := cmd.Int64()
	rdb.Del(context.WithoutCancel(ctx), latch)
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("IllegalMonitorStateException: attempt to unlock lock, not locked by current thread by node id: %s thread-id: %d", l.jvm.id, tid)
	}
	return n, err
}

// renew is one watchdog tick for thread tid's hold: 1 renewed, 0 gone.
func (l *javaLock) renew(ctx context.Context, tid int) (int64, error) {
	rdb, lease := l.jvm.rdb, l.jvm.lease.Milliseconds()
	var res []int64
	var err error
	switch l.kind {
	case javaReadLock:
		res, err = javaReadRenew.Run(ctx, rdb, []string{l.name, l.tag()}, lease, 1, l.owner(tid)).Int64Slice()
	default:
		res, err = javaLockRenew.Run(ctx, rdb, []string{l.name}, lease, l.field(tid)).Int64Slice()
	}
	if err != nil || len(res) != 1 {
		return 0, fmt.Errorf("renew: %v %w", res, err)
	}
	return res[0], nil
}

// watchdog renews thread tid's hold every lease/3 until stop is called
// or the hold is gone, as Redisson's LockRenewalScheduler does.
func (l *javaLock) watchdog(tid int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(l.jvm.lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if n, err := l.renew(context.Background(), tid); err == nil && n == 0 {
					return
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// abandon is the fair lock's acquireFailed.
func (l *javaLock) abandon(ctx context.Context, tid int, wait time.Duration) error {
	keys := l.fairKeys()[1:]
	err := javaFairAbandon.Run(ctx, l.jvm.rdb, keys, l.owner(tid), wait.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// tryLock is RedissonLock.tryLock(waitTime, -1, ms) with the watchdog
// lease, and lock() for a negative waitTime. After a failed attempt it
// subscribes to the thread's channel, then loops: attempt, and wait for a
// message for at most the ttl the attempt returned and the time left. A
// timed wait that runs out gives up (acquireFailed) without a last
// attempt, even when a message came right then (reference §8.3).
// subscribed, if set, is called once the subscription is confirmed.
func (l *javaLock) tryLock(ctx context.Context, tid int, waitTime time.Duration, subscribed func()) (bool, error) {
	wait := l.wait
	timed := waitTime >= 0
	if timed {
		wait = waitTime
	}
	deadline := time.Now().Add(waitTime)
	giveUp := func() (bool, error) {
		if l.kind == javaFairLock {
			return false, l.abandon(ctx, tid, wait)
		}
		return false, nil
	}
	ok, _, err := l.attempt(ctx, tid, l.jvm.lease, wait)
	if ok || err != nil {
		return ok, err
	}
	if timed && !time.Now().Before(deadline) {
		return giveUp()
	}
	ps := l.jvm.rdb.Subscribe(ctx, l.channel(tid))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return false, err
	}
	if subscribed != nil {
		subscribed()
	}
	msgs := ps.Channel()
	for {
		ok, ttl, err := l.attempt(ctx, tid, l.jvm.lease, wait)
		if ok || err != nil {
			return ok, err
		}
		if timed && !time.Now().Before(deadline) {
			return giveUp()
		}
		d := time.Hour
		if ttl >= 0 {
			// Redisson waits ttl ms, 0 included (a spin); a floor of 1 ms
			// keeps the test from burning the CPU.
			d = max(time.Duration(ttl)*time.Millisecond, time.Millisecond)
		}
		if timed {
			d = min(d, time.Until(deadline))
		}
		timer := time.NewTimer(d)
		select {
		case <-msgs:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return false, ctx.Err()
		}
		timer.Stop()
		if timed && !time.Now().Before(deadline) {
			return giveUp()
		}
	}
}

// lockWithWatchdog is lock(): it waits and starts the watchdog. The
// returned stop ends the watchdog.
func (l *javaLock) lockWithWatchdog(ctx context.Context, tid int, subscribed func()) (stop func(), err error) {
	if _, err := l.tryLock(ctx, tid, -1, subscribed); err != nil {
		return nil, err
	}
	return l.watchdog(tid), nil
}

// javaUnlockAll is unlock() after stopping the watchdog, reporting an
// error to t.
func (l *javaLock) release(t testing.TB, ctx context.Context, tid int, stop func()) {
	stop()
	if _, err := l.unlock(ctx, tid); err != nil {
		t.Error(err)
	}
}

// section is a critical section that loses increments when two owners run
// it at once: a load and a store of one counter with a pause between, and
// a check that nobody else is inside.
type section struct {
	counter atomic.Int64
	inside  atomic.Int64
	overlap atomic.Int64
}

func (s *section) run(pause time.Duration) {
	if s.inside.Add(1) != 1 {
		s.overlap.Add(1)
	}
	v := s.counter.Load()
	time.Sleep(pause)
	s.counter.Store(v + 1)
	s.inside.Add(-1)
}

// check reports a count other than want, or overlapping sections.
func (s *section) check(t testing.TB, want int64) {
	t.Helper()
	if got := s.counter.Load(); got != want || s.overlap.Load() != 0 {
		t.Errorf("counter %d after %d critical sections, %d overlaps", got, want, s.overlap.Load())
	}
}

// latencies keeps wake-up latencies and reports them.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// check logs the latencies and fails t when their median is not below
// median (the lost-message fallback is the lease, tens of seconds).
func (l *latencies) check(t testing.TB, what string, median time.Duration) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		t.Errorf("%s: no wake-ups measured", what)
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	m := l.d[len(l.d)/2]
	t.Logf("%s: %d wake-ups, median %v, max %v", what, len(l.d), m, l.d[len(l.d)-1])
	if m > median {
		t.Errorf("%s: median wake-up %v, want under %v", what, m, median)
	}
}
