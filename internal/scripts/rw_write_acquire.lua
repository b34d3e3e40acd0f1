-- rw_write_acquire.lua: take a write lock, or confirm the owner has it
-- (Redisson ReadWriteLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fencing token counter
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner's write field (<owner>:write)
-- ARGV[3]  owner (its read holds forbid an upgrade)
-- ARGV[4]  fencing: "-1" none; "0" a first acquisition; T > 0 a re-entry
--          whose previous token was T (see fence in fence.lua)
--
-- Returns {1, token} when the owner holds the write lock now, {0, pttl}
-- when another owner holds the lock, {-1, 0} when this owner holds only
-- read locks on it (an upgrade would wait for itself). Running it twice is
-- harmless: a dlock owner's write count stays 1 (the Client counts
-- re-entries).
local lease = tonumber(ARGV[1])
if reentry(ARGV[4]) and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {-2, 0} -- the hold this re-entry is for is gone
end
local mode = redis.call('hget', KEYS[1], 'mode')
if (not mode and redis.call('exists', KEYS[1]) == 0)
    or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  local held = mode ~= false
  if not held then
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  end
  -- Redisson adds the lease to the remaining TTL on re-entry; extending to
  -- the lease is enough and keeps the TTL bounded.
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  return {1, fence(KEYS[2], ARGV[4], held)}
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
  return {-1, 0}
end
return {0, redis.call('pttl', KEYS[1])}
