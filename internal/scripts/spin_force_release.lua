-- spin_force_release.lua: delete a spin lock whoever holds it (Redisson
-- RSpinLock.forceUnlock: a DEL, no message).
--
-- KEYS[1]  the lock key
-- KEYS[2]  this request's latch, as in force_release.lua: a command re-sent
--          after a lost reply answers as the first run did
-- ARGV[1]  latch lifetime in milliseconds
--
-- Returns 1 when a lock was deleted, 0 when there was none.
local done = redis.call('get', KEYS[2])
if done then
  return tonumber(done)
end
local deleted = redis.call('del', KEYS[1])
redis.call('set', KEYS[2], deleted, 'px', ARGV[1])
return deleted
