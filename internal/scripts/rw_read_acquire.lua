-- rw_read_acquire.lua: one attempt at the read half of a read-write lock
-- (Redisson ReadWriteLock layout).
--
-- KEYS[1]  the lock hash: mode ("read"/"write"), <owner> -> read holds,
--          <owner>:write -> write holds
-- KEYS[2]  this owner's hold-key prefix, {name}:<owner>:rwlock_timeout: read
--          hold k lives in <prefix>:k with its own lease
-- KEYS[3]  the fencing token counter (redisson_lock_token:{name})
-- KEYS[4]  this request's latch (makes a re-sent command a no-op)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner, <clientUUID>:<n>
-- ARGV[3]  the owner's write field, <owner>:write
-- ARGV[4]  "1" to increment the fencing token, "0" not to
-- ARGV[5]  latch lifetime in milliseconds
--
-- Readers share the lock; a writer excludes everyone but its own read
-- holds (downgrade). Returns {1, token} when taken (token 0 when not
-- fenced), {0, pttl} when a writer (or another kind of lock) holds it.
local done = redis.call('get', KEYS[4])
if done then
  return {1, tonumber(done)}
end
local lease = tonumber(ARGV[1])
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read'
    or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1)
    or (not mode and redis.call('exists', KEYS[1]) == 0) then
  if not mode then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', lease)
  -- The lock lives as long as its longest-living hold.
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  local token = 0
  if ARGV[4] == '1' then
    token = redis.call('incr', KEYS[3])
  end
  redis.call('set', KEYS[4], token, 'px', ARGV[5])
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
