-- sem_release.lua: give ARGV[1] permits to a counting semaphore, creating
-- it if missing, and publish the new count (Redisson RSemaphore.release).
-- KEYS[1] semaphore, KEYS[2] its channel redisson_sc:{name}
-- ARGV[1] permits (> 0), ARGV[2] publish or spublish
-- Returns the new count.
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return value
