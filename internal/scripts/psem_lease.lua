-- psem_lease.lua: after the reclaim step, set the expiry of each permit in
-- ARGV[4..] that is still held to ARGV[3] (Redisson updateLeaseTime, for
-- many permits at once: the watchdog renews a semaphore's permits in one
-- call). ARGV[3] '0' only checks them: the watchdog's visit of permits
-- with a fixed lease. An empty argument ends the list: the transport (Run)
-- appends one to every script it sends, to count how often it was written.
-- Returns, per permit, 1 if it was held (and now expires at ARGV[3]), 0 if
-- not held.
reclaim(-1)
local out = {}
for i = 4, #ARGV do
  if ARGV[i] == '' then break end
  if redis.call('zscore', KEYS[2], ARGV[i]) ~= false then
    if ARGV[3] ~= '0' then
      redis.call('zadd', KEYS[2], ARGV[3], ARGV[i])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
