-- rw_read_acquire.lua: take a read lock, or confirm the owner has one
-- (Redisson ReadWriteLock layout).
--
-- KEYS[1]  the lock hash: mode, <owner> -> read holds, <owner>:write
-- KEYS[2]  this owner's hold-key prefix ({name}:<owner>:rwlock_timeout);
--          read hold k lives in <prefix>:<k> with its own lease
-- KEYS[3]  the fencing token counter
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner
-- ARGV[3]  owner's write field (<owner>:write)
-- ARGV[4]  fencing: "-1" none, anything else a new token (readers share
--          the lock, so every read acquisition takes one)
--
-- Returns {1, token} when the owner holds a read lock now, {0, pttl} when
-- a writer holds the lock. Running it twice is harmless: a dlock owner has
-- one read hold in Redis (the Client counts re-entries), whose lease a
-- re-sent command only sets again.
local lease = tonumber(ARGV[1])
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read'
    or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1)
    or (not mode and redis.call('exists', KEYS[1]) == 0) then
  if not mode then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  local n = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0')
  if n == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    n = 1
  end
  for k = 1, n do
    redis.call('set', KEYS[2] .. ':' .. k, 1, 'px', lease)
  end
  -- The lock lives as long as its longest-living hold.
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  local token = 0
  if ARGV[4] ~= '-1' then
    token = redis.call('incr', KEYS[3])
  end
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
