-- rw_read_release.lua: release one read hold of a read-write lock (Redisson
-- ReadWriteLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- KEYS[3]  this owner's hold-key prefix ({name}:<owner>:rwlock_timeout)
-- KEYS[4]  the prefix of every owner's hold keys ({name}): owner o's read
--          hold k is <KEYS[4]>:<o>:rwlock_timeout:<k>
-- KEYS[5]  this request's latch (redisson_unlock_latch:{name}:<requestId>)
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  owner
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  latch lifetime in milliseconds
--
-- Returns 1 when the lock was freed, 0 when it is still held (by this or
-- another owner), -1 when this owner held no read lock. A re-sent command
-- returns the first answer again instead of releasing twice.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; waiters may still be asleep.
    redis.call(ARGV[3], KEYS[2], ARGV[1])
  end
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left == 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (left + 1))
if mode == 'write' then
  -- The owner downgraded and still holds the write lock, whose lease rules.
  redis.call('set', KEYS[5], 0, 'px', ARGV[4])
  return 0
end
-- The lock lives as long as its longest-living read hold. Holds whose
-- keys have expired (their owner died) no longer count.
local longest = 0
for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
  local n = tonumber(redis.call('hget', KEYS[1], field))
  if n then
    for k = 1, n do
      longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. k))
    end
  end
end
if longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
  redis.call('set', KEYS[5], 0, 'px', ARGV[4])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1
