-- psem_count.lua: after the reclaim step, return {available, acquired,
-- total}: the semaphore's count (0 when missing), the number of permits
-- held, and their sum, 0 when the semaphore is missing (Redisson
-- availablePermits, acquiredPermits and getPermits).
reclaim(-1)
local value = redis.call('get', KEYS[1])
local acquired = redis.call('zcard', KEYS[2])
if value == false then
  return {0, acquired, 0}
end
return {tonumber(value), acquired, tonumber(value) + acquired}
