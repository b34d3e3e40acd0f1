-- spin_release.lua: give back an owner's hold on a spin lock (Redisson
-- RSpinLock: RLock's hash, no pub/sub). Like lock_release.lua, but nothing
-- is published: spin waiters poll with a backoff, and a spin lock is for
-- deployments where pub/sub is the bottleneck or does not pass.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  owner field
--
-- Returns 1 when the lock was freed, -1 when this owner did not hold it (a
-- command re-sent after a lost reply also finds nothing: the Client knows
-- it re-sent and reads that as released).
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
  return -1
end
return 1
