-- rw_write_release.lua: give back an owner's write hold on a read-write
-- lock (Redisson ReadWriteLock layout). The Client counts re-entries, so
-- this runs once, for the owner's last write Unlock.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel (redisson_rwlock:{name})
-- ARGV[1]  message to publish when the write lock is freed ("1": wake
--          every waiter, readers may all enter)
-- ARGV[2]  owner's write field (<owner>:write)
-- ARGV[3]  publish command: "publish" or "spublish"
--
-- Returns 1 when the write lock was freed, -1 when this owner did not
-- hold it (also what a command re-sent after a lost reply finds; the
-- Client knows it re-sent and reads that as released).
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; waiters may still be asleep.
    redis.call(ARGV[3], KEYS[2], ARGV[1])
  end
  return -1
end
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  -- The owner's read holds remain (downgrade): readers may join them now,
  -- so they are woken too, where Redisson stays silent.
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
