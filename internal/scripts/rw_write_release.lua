-- rw_write_release.lua: release one write hold of a read-write lock
-- (Redisson ReadWriteLock layout). The last one wakes every waiter
-- (message "1"): all waiting readers may enter together.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- KEYS[3]  this request's latch (redisson_unlock_latch:{name}:<requestId>)
-- ARGV[1]  message to publish when the write lock is freed ("1")
-- ARGV[2]  lease in milliseconds, kept when holds remain
-- ARGV[3]  the owner's write field, <owner>:write
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  latch lifetime in milliseconds
--
-- Returns 1 when the write lock was freed, 0 when this owner still holds
-- it, -1 when this owner did not hold it. A re-sent command returns the
-- first answer again instead of releasing twice.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; waiters may still be asleep.
    redis.call(ARGV[4], KEYS[2], ARGV[1])
  end
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  -- The owner's read holds remain (downgrade): readers may join them now,
  -- so they are woken too, where Redisson stays silent.
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
