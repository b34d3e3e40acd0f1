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
-- ARGV[4]  fencing and re-entry (fence.lua); readers share the lock, so
--          every fenced read acquisition takes a new token
-- ARGV[5]  longest sleep, in milliseconds, while the writer also holds
--          read locks (see below)
--
-- Returns {1, token} when the owner holds a read lock now, {0, ms} when
-- a writer holds the lock: how long to sleep unless woken, the lock's pttl,
-- or at most ARGV[5] while the writer also holds read locks. Such a writer
-- downgrades when it releases its write lock, and readers may enter then;
-- Redisson's write unlock says nothing in that case, so a reader polls
-- rather than sleep out the lock's lease. Running it twice is harmless: a dlock owner has
-- one read hold in Redis (the Client counts re-entries), whose lease a
-- re-sent command only sets again.
local lease = tonumber(ARGV[1])
if reentry(ARGV[4]) and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {-2, 0} -- the hold this re-entry is for is gone
end
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
  if fenced(ARGV[4]) then
    counterAt(KEYS[3], tonumber(ARGV[4]))
    token = nextToken(KEYS[3])
  end
  return {1, token}
end
local ttl = redis.call('pttl', KEYS[1])
if mode == 'write' then
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local reader = string.match(field, '^(.*):write$')
    if reader and redis.call('hexists', KEYS[1], reader) == 1 then
      local poll = tonumber(ARGV[5])
      if ttl < 0 or ttl > poll then
        ttl = poll
      end
      break
    end
  end
end
return {0, ttl}
