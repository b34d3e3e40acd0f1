-- sem_try_set_ttl.lua: sem_try_set.lua with a time to live (Redisson
-- RSemaphore.trySetPermits(permits, timeToLive), 3.29.0+): set a
-- semaphore's permits if it has none set yet, expiring after ARGV[3] ms,
-- and publish them.
-- KEYS[1] semaphore, KEYS[2] its channel
-- ARGV[1] permits, ARGV[2] publish or spublish, ARGV[3] time to live in ms
-- Returns 1 if set, 0 if the semaphore already existed.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
