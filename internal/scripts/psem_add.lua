-- psem_add.lua: add ARGV[3] permits (negative: remove), a missing
-- semaphore counting as 0, and publish the delta if it is positive
-- (Redisson RPermitExpirableSemaphore.addPermits, which publishes the delta
-- where RSemaphore publishes the new count). No reclaim step, as in
-- Redisson; ARGV[1] is unused.
-- Returns the new count.
local value = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[3])
redis.call('set', KEYS[1], value)
if tonumber(ARGV[3]) > 0 then
  redis.call(ARGV[2], KEYS[3], ARGV[3])
end
return value
