-- psem_lease.lua: after the reclaim step, lease each permit in ARGV[4..]
-- that is still held for ARGV[3] ms from now ('-1': no lease;
-- psem_clock.lua) (Redisson updateLeaseTime, for
-- many permits at once: the watchdog renews a semaphore's permits in one
-- call). ARGV[3] '0' only checks them: the watchdog's visit of permits
-- with a fixed lease. An empty argument ends the list: the transport (Run)
-- appends one to every script it sends, to count how often it was written.
-- Returns, per permit, 1 if it was held (and is now leased for ARGV[3]),
-- 0 if not held.
reclaim(-1)
local out = {}
for i = 4, #ARGV do
  if ARGV[i] == '' then break end
  if redis.call('zscore', KEYS[2], ARGV[i]) ~= false then
    if ARGV[3] ~= '0' then
      redis.call('zadd', KEYS[2], expiry(ARGV[3]), ARGV[i])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
