-- psem_count.lua: after the reclaim step, return {available, acquired}:
-- the semaphore's count (0 when missing) and the number of permits held
-- (Redisson availablePermits and acquiredPermits).
reclaim(-1)
local available = tonumber(redis.call('get', KEYS[1]) or '0')
return {available, redis.call('zcard', KEYS[2])}
