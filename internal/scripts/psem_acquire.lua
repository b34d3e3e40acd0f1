-- psem_acquire.lua: take one permit with id ARGV[4] leased for ARGV[3] ms
-- from now ('-1': no lease; psem_clock.lua) (Redisson
-- RPermitExpirableSemaphore.tryAcquire for one permit). ARGV[5] is the
-- no-expiry score 922337203685477. The zset takes the semaphore's TTL, if
-- it has one.
-- Returns 'OK' when taken, 'OK+' when taken and more permits are
-- available (a waiter that took one wakes the next); otherwise ':<ms>'
-- with how long until the earliest held permit expires, on the server's
-- clock, or nil when none expires (or none is held).
--
-- Unlike Redisson's, the script is idempotent: the Redis client sends a
-- command again when the reply was lost (a timeout, a dropped connection),
-- and a second run with the same id must not take a second permit.
if redis.call('zscore', KEYS[2], ARGV[4]) ~= false then
  return 'OK'
end
reclaim(1)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], expiry(ARGV[3]), ARGV[4])
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  if tonumber(value) > 1 then
    return 'OK+'
  end
  return 'OK'
end
local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if v[1] ~= nil and v[2] ~= ARGV[5] then
  return ':' .. tostring(math.max(tonumber(v[2]) - now, 0))
end
return nil
