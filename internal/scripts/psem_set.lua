-- psem_set.lua: make the semaphore's total (available plus held) ARGV[3],
-- and publish ARGV[3] (Redisson RPermitExpirableSemaphore.setPermits,
-- which publishes the total, and only when something changed). No reclaim
-- step, as in Redisson: an expired permit still counts as held.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[3])
  redis.call(ARGV[2], KEYS[3], ARGV[3])
  return 1
end
local total = tonumber(redis.call('get', KEYS[1])) + redis.call('zcard', KEYS[2])
if total ~= tonumber(ARGV[3]) then
  redis.call('incrby', KEYS[1], tonumber(ARGV[3]) - total)
  redis.call(ARGV[2], KEYS[3], ARGV[3])
  return 1
end
return 0
