-- rw_read_release.lua: give back an owner's read hold on a read-write lock
-- (Redisson ReadWriteLock layout). The Client counts re-entries, so this
-- runs once, for the owner's last read Unlock.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- KEYS[3]  this owner's hold-key prefix ({name}:<owner>:rwlock_timeout)
-- KEYS[4]  the prefix of every owner's hold keys ({name}): owner o's read
--          hold k is <KEYS[4]>:<o>:rwlock_timeout:<k>
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  owner
-- ARGV[3]  publish command: "publish" or "spublish"
--
-- Returns 1 when the lock was freed, 0 when it is still held (by this
-- owner's write lock or another owner), -1 when this owner held no read
-- lock (also what a command re-sent after a lost reply finds; the Client
-- knows it re-sent and reads that as released).
local mode = redis.call('hget', KEYS[1], 'mode')
local n = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0')
if not mode or n == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; waiters may still be asleep.
    redis.call(ARGV[3], KEYS[2], ARGV[1])
  end
  return -1
end
redis.call('hdel', KEYS[1], ARGV[2])
for k = 1, n do
  redis.call('del', KEYS[3] .. ':' .. k)
end
if mode == 'write' then
  -- The owner downgraded and still holds the write lock, whose lease rules.
  return 0
end
local longest = 0
for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
  local holds = tonumber(redis.call('hget', KEYS[1], field))
  if holds then
    for k = 1, holds do
      longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. k))
    end
  end
end
if longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
