-- psem_release.lua: give back permit ARGV[3] and publish the new count
-- (Redisson RPermitExpirableSemaphore.tryRelease; no reclaim step). A
-- permit that had expired but was not reclaimed yet still goes back to the
-- pool. Expired is as of now, on the server's clock (psem_clock.lua).
-- KEYS[1] semaphore, KEYS[2] timeout zset, KEYS[3] channel
-- ARGV[1] unread, ARGV[2] publish or spublish, ARGV[3] permit id
-- Returns 1 if released, 2 if released after it had expired, 0 if the
-- permit was not held (released, reclaimed or never taken).
local expire = redis.call('zscore', KEYS[2], ARGV[3])
if redis.call('zrem', KEYS[2], ARGV[3]) ~= 1 then
  return 0
end
local value = redis.call('incrby', KEYS[1], 1)
redis.call(ARGV[2], KEYS[3], value)
if tonumber(expire) <= now then
  return 2
end
return 1
