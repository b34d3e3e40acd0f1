-- psem_lease_time.lua: after the reclaim step, return the expiry score of
-- permit ARGV[3] (Redisson RPermitExpirableSemaphore.getLeaseTime, which
-- returns score - now, or -1 for the no-expiry score), or nil when it is
-- not held.
reclaim(-1)
local score = redis.call('zscore', KEYS[2], ARGV[3])
if score == false then
  return nil
end
return score
