-- lock_release.lua: give back an owner's hold on a reentrant lock (Redisson
-- RLock layout). The Client counts re-entries, so this runs once, for the
-- last Unlock.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel (redisson_lock__channel:{name}); a key so that
--          cluster routing and sharded publish see the lock's slot
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  owner field
-- ARGV[3]  publish command: "publish" or "spublish"
--
-- Returns 1 when the lock was freed, -1 when this owner did not hold it. A
-- command re-sent after a lost reply finds nothing and returns -1: the
-- Client knows it re-sent the command and reads that as released. (The
-- hash has one field, the holder's: HDEL of the last field deletes it.)
if redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
  return -1
end
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
