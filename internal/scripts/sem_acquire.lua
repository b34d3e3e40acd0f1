-- sem_acquire.lua: take ARGV[1] permits of a counting semaphore if that
-- many are available (Redisson RSemaphore.tryAcquire). A missing key has no
-- permits. Nothing is published: nobody waits for fewer permits.
-- KEYS[1] semaphore (string integer: available permits)
-- ARGV[1] permits to take (> 0)
-- Returns 1 if taken, 0 if not.
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
