-- sem_try_set.lua: set a semaphore's permits if it has none set yet, and
-- publish them (Redisson RSemaphore and RPermitExpirableSemaphore
-- trySetPermits, without a TTL).
-- KEYS[1] semaphore, KEYS[2] its channel
-- ARGV[1] permits, ARGV[2] publish or spublish
-- Returns 1 if set, 0 if the semaphore already existed.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
