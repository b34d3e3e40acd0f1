-- psem_acquire_n.lua: take ARGV[4] permits at once, or none, with the ids
-- ARGV[5..] (one each), each leased for ARGV[3] ms from now ('-1': no
-- lease; psem_clock.lua) (Redisson RPermitExpirableSemaphore.tryAcquire(n)
-- on the same keys; the reclaim step frees at most n, as Redisson's). The
-- zset takes the semaphore's TTL, if it has one.
-- Returns 'OK' when taken; otherwise ':<ms>', how long until the earliest
-- held permit expires on the server's clock, or nil when none expires.
--
-- Idempotent, as psem_acquire.lua: a second run with the same ids (the
-- Redis client re-sends a command whose reply it lost) finds the first id
-- held and takes nothing more.
if redis.call('zscore', KEYS[2], ARGV[5]) ~= false then
  return 'OK'
end
local n = tonumber(ARGV[4])
reclaim(n)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= n then
  redis.call('decrby', KEYS[1], n)
  local score = expiry(ARGV[3])
  for i = 5, 4 + n do
    redis.call('zadd', KEYS[2], score, ARGV[i])
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return 'OK'
end
local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if v[1] ~= nil and v[2] ~= '922337203685477' then
  return ':' .. tostring(math.max(tonumber(v[2]) - now, 0))
end
return nil
