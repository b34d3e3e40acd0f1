-- sem_drain.lua: take every available permit (Redisson drainPermits): the
-- count becomes 0 unless the semaphore is missing. Nothing is published.
-- KEYS[1] semaphore
-- Returns the count there was (0 for a missing semaphore).
local value = redis.call('get', KEYS[1])
if value == false then
  return 0
end
redis.call('set', KEYS[1], 0)
return tonumber(value)
