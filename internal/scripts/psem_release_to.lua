-- psem_release_to.lua: give back permit ARGV[3] and, in the same step,
-- hand it to a waiter of the same Client as permit ARGV[4] expiring at
-- ARGV[5] (Redisson RPermitExpirableSemaphore layout; no reclaim step, as
-- in psem_release.lua). Handing over saves the waiter the publish, wake-up
-- and new attempt that a plain release costs it, and saves every other
-- waiter of every Client a wake-up for a permit it cannot have: the
-- available count and the channel do not move, and to a Java client it
-- looks as if the waiter had taken the permit with tryAcquire.
--
-- KEYS[1] semaphore, KEYS[2] timeout zset, KEYS[3] channel
-- ARGV[1] unread, ARGV[2] publish or spublish, ARGV[3] permit id
-- ARGV[4] the waiter's permit id, ARGV[5] its lease in ms ('-1': none;
--         psem_clock.lua, whose now, the server's clock, is also what
--         the permit given back is expired against)
-- ARGV[6] when to hand over: "always"; "numsub" or "shardnumsub": only if
--         no more than ARGV[7] connections are subscribed to the channel,
--         that is when no other process waits; "never"
-- ARGV[7] how many of the channel's subscriptions are this Client's
--
-- Returns {outcome, expired}: outcome 2 when the permit went to the
-- waiter, 1 when it went back to the pool (and the new count was
-- published), 0 when permit ARGV[3] was not held (released, reclaimed or
-- never taken); expired 1 when the permit given back had expired (it was
-- not reclaimed yet). A permit is never handed over while the semaphore
-- has fewer than none available (SetPermits shrank it): it goes back to
-- the pool, which needs it.
--
-- Idempotent: a command re-sent after a lost reply finds the waiter's
-- permit, and permit ARGV[3] gone, and answers 2 again. If both are held,
-- the waiter's id holds a permit some other way (never handed by this
-- release): permit ARGV[3] goes back to the pool, not kept for nobody.
local handed = redis.call('zscore', KEYS[2], ARGV[4]) ~= false
local expire = redis.call('zscore', KEYS[2], ARGV[3])
if expire == false then
  if handed then
    return {2, 0}
  end
  return {0, 0}
end
redis.call('zrem', KEYS[2], ARGV[3])
local expired = 0
if tonumber(expire) <= now then
  expired = 1
end
local hand = not handed and ARGV[6] == 'always'
if not handed and (ARGV[6] == 'numsub' or ARGV[6] == 'shardnumsub') then
  -- pcall: a user without +pubsub (ACL) frees the permit instead.
  local subs = redis.pcall('pubsub', ARGV[6], KEYS[3])
  hand = type(subs) == 'table' and subs.err == nil and tonumber(subs[2]) <= tonumber(ARGV[7])
end
if hand and tonumber(redis.call('get', KEYS[1]) or '0') >= 0 then
  redis.call('zadd', KEYS[2], expiry(ARGV[5]), ARGV[4])
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return {2, expired}
end
local value = redis.call('incrby', KEYS[1], 1)
redis.call(ARGV[2], KEYS[3], value)
return {1, expired}
