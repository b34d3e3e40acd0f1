-- force_release.lua: delete a lock whoever holds it and wake its waiters.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the unlock channel
-- ARGV[1]  message to publish ("0")
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Returns 1 when a lock was deleted, 0 when there was none.
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
