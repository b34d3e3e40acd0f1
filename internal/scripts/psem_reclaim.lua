-- psem_reclaim.lua: the step every permit-semaphore script but release
-- starts with (Redisson RPermitExpirableSemaphore layout). sync.go puts this
-- file in front of each psem_*.lua script that reclaims.
--
-- KEYS[1] is the semaphore (string integer: available permits), KEYS[2] its
-- timeout zset {name}:timeout (permit id, 16 raw bytes -> expiry in epoch
-- ms: on the server's clock when dlock wrote it, on the Java client's when
-- Redisson did; 922337203685477 for a permit without expiry), KEYS[3] its
-- channel redisson_sc:{name}. ARGV[1] is the caller's clock, unread
-- (psem_clock.lua, which goes first and defines now), ARGV[2] the publish
-- command (publish or spublish).

-- reclaim returns expired permits to the pool, at most limit of them (-1:
-- all), and publishes the new count if it is positive, as Redisson does.
-- Expired is as of now, the server's clock (Redisson: the caller's).
local function reclaim(limit)
  local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, limit)
  if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local value = redis.call('incrby', KEYS[1], #expired)
    if tonumber(value) > 0 then
      redis.call(ARGV[2], KEYS[3], value)
    end
  end
end
