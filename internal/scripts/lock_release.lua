-- lock_release.lua: release one hold of a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel (redisson_lock__channel:{name}); a key so that
--          cluster routing and sharded publish see the lock's slot
-- KEYS[3]  this request's latch (redisson_unlock_latch:{name}:<requestId>)
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  lease in milliseconds, set again when holds remain
-- ARGV[3]  owner field
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  latch lifetime in milliseconds
--
-- Returns 1 when the lock was freed, 0 when this owner still holds it,
-- -1 when this owner did not hold it. A re-sent command returns the first
-- answer again instead of releasing twice.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
