-- force_release.lua: delete a lock whoever holds it and wake its waiters.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the unlock channel
-- KEYS[3]  this request's latch (redisson_unlock_latch:{name}:<requestId>):
--          a command re-sent after a lost reply must not delete a lock
--          someone took in between; the Client deletes the latch as soon
--          as the answer is in
-- ARGV[1]  message to publish ("0")
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  latch lifetime in milliseconds, should the Client not get to
--          delete it
--
-- Returns 1 when a lock was deleted, 0 when there was none. A re-sent
-- command returns the first answer again instead of deleting again.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
end
redis.call('set', KEYS[3], deleted, 'px', ARGV[3])
return deleted
