-- sem_release_if_exists.lua: sem_release.lua for a semaphore that exists
-- only (Redisson RSemaphore.releaseIfExists, 4.0.0+): a deleted or
-- expired semaphore is not created again.
-- KEYS[1] semaphore, KEYS[2] its channel redisson_sc:{name}
-- ARGV[1] permits (> 0), ARGV[2] publish or spublish
-- Returns 1 if released, 0 if the semaphore does not exist.
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return 1
