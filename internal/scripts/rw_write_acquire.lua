-- rw_write_acquire.lua: one attempt at the write half of a read-write lock
-- (Redisson ReadWriteLock layout).
--
-- KEYS[1]  the lock hash: mode, <owner> -> read holds, <owner>:write -> write holds
-- KEYS[2]  the fencing token counter (redisson_lock_token:{name})
-- KEYS[3]  this request's latch (makes a re-sent command a no-op)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the owner's write field, <owner>:write
-- ARGV[3]  the owner's read field, <owner>
-- ARGV[4]  "1" to increment the fencing token, "0" not to
-- ARGV[5]  latch lifetime in milliseconds
--
-- Returns {1, token} when taken (token 0 when not fenced), {0, pttl} when
-- others hold it, {-1, 0} when the owner holds read locks but not the write
-- lock: waiting for the readers to leave would wait for itself.
local done = redis.call('get', KEYS[3])
if done then
  return {1, tonumber(done)}
end
local lease = tonumber(ARGV[1])
local mode = redis.call('hget', KEYS[1], 'mode')
if (not mode and redis.call('exists', KEYS[1]) == 0)
    or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  if not mode then
    redis.call('hset', KEYS[1], 'mode', 'write')
  end
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- Redisson adds the lease to the remaining TTL on re-entry; extending to
  -- the lease is enough and keeps the TTL bounded.
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  local token = 0
  if ARGV[4] == '1' then
    token = redis.call('incr', KEYS[2])
  end
  redis.call('set', KEYS[3], token, 'px', ARGV[5])
  return {1, token}
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
  return {-1, 0}
end
return {0, redis.call('pttl', KEYS[1])}
