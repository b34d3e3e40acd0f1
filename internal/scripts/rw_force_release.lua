-- rw_force_release.lua: delete a read-write lock held in the given mode,
-- whoever holds it, and wake its waiters with Redisson's message for that
-- mode (read and write forceUnlock): "0" after a read lock, since only
-- writers wait for a read-held lock and one of them can enter, "1" after a
-- write lock, which wakes every waiting reader.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- KEYS[3]  this request's latch: a re-sent command must not delete a lock
--          someone took in between
-- ARGV[1]  the mode to delete: "read" or "write"
-- ARGV[2]  message to publish ("0" for read, "1" for write)
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  latch lifetime in milliseconds
--
-- Returns 1 when a lock was deleted, 0 when none was held in that mode.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
local deleted = 0
if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[2])
  deleted = 1
end
redis.call('set', KEYS[3], deleted, 'px', ARGV[4])
return deleted
