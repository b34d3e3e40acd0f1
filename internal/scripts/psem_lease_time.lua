-- psem_lease_time.lua: after the reclaim step, return how long permit
-- ARGV[3] has left in ms, its expiry score minus now on the server's clock
-- (Redisson RPermitExpirableSemaphore.getLeaseTime, which subtracts the
-- caller's clock), or -1 for the no-expiry score; nil when it is not held.
reclaim(-1)
local score = redis.call('zscore', KEYS[2], ARGV[3])
if score == false then
  return nil
end
if score == '922337203685477' then
  return -1
end
return tonumber(score) - now
