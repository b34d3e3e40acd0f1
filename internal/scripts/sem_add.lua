-- sem_add.lua: add ARGV[1] permits (negative: remove) to a counting
-- semaphore, a missing one counting as 0, and publish the new count
-- (Redisson RSemaphore.addPermits, which publishes even a count <= 0).
-- SET drops a TTL the key may have had, as in Redisson.
-- KEYS[1] semaphore, KEYS[2] its channel
-- ARGV[1] delta, ARGV[2] publish or spublish
-- Returns the new count.
local value = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1])
redis.call('set', KEYS[1], value)
redis.call(ARGV[2], KEYS[2], value)
return value
