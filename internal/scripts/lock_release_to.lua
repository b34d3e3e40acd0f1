-- lock_release_to.lua: give back an owner's hold on a reentrant lock and,
-- in the same step, hand the lock to a waiter of the same Client (Redisson
-- RLock layout; runs after fence.lua). Handing over saves the waiter the
-- publish, wake-up and new attempt that a plain release costs it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel (redisson_lock__channel:{name})
-- KEYS[3]  the fencing token counter (redisson_lock_token:{name})
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  owner field
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  the waiter's owner field
-- ARGV[5]  the waiter's lease in milliseconds
-- ARGV[6]  the waiter's fencing argument ("-1" none, "0" a token)
-- ARGV[7]  when to hand over: "always"; "numsub" or "shardnumsub": only
--          if no more than ARGV[8] connections are subscribed to the
--          channel, that is when no other process waits; "never"
-- ARGV[8]  how many of the channel's subscriptions are this Client's
--
-- Returns {2, token} when the lock was handed to the waiter, {1, 0} when
-- it was freed (and the release published), {0, 0} when another owner's
-- field remains, {-1, 0} when this owner did not hold it (also what a
-- re-sent command finds: the Client reads that as released, and the
-- waiter's own next attempt finds out whether it holds the lock).
if redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
  return {-1, 0}
end
if redis.call('exists', KEYS[1]) == 1 then
  return {0, 0}
end
local hand = ARGV[7] == 'always'
if ARGV[7] == 'numsub' or ARGV[7] == 'shardnumsub' then
  -- pcall: a user without +pubsub (ACL) frees the lock instead.
  local subs = redis.pcall('pubsub', ARGV[7], KEYS[2])
  hand = type(subs) == 'table' and subs.err == nil and tonumber(subs[2]) <= tonumber(ARGV[8])
end
if hand then
  redis.call('hset', KEYS[1], ARGV[4], 1)
  redis.call('pexpire', KEYS[1], ARGV[5])
  return {2, fence(KEYS[3], ARGV[6], false)}
end
redis.call(ARGV[3], KEYS[2], ARGV[1])
return {1, 0}
