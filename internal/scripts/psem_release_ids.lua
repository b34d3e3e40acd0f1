-- psem_release_ids.lua: give back the permits ARGV[3..] all together, or
-- none (Redisson RPermitExpirableSemaphore.tryRelease(list), all-or-nothing
-- since 3.41.0): if any of them is not held or has expired (on the
-- server's clock, psem_clock.lua), nothing changes and it returns 0.
-- Otherwise, after the reclaim step, the permits go back to the pool, the
-- number given back is published (as Redisson publishes it: a message "n"
-- wakes n waiters), and that number is returned. An empty argument ends
-- the list (the transport appends one, as in psem_lease.lua).
local ids = {}
for i = 3, #ARGV do
  if ARGV[i] == '' then break end
  local score = redis.call('zscore', KEYS[2], ARGV[i])
  if score == false or (score ~= '922337203685477' and tonumber(score) <= now) then
    return 0
  end
  ids[#ids + 1] = ARGV[i]
end
reclaim(-1)
local removed = redis.call('zrem', KEYS[2], unpack(ids))
redis.call('incrby', KEYS[1], removed)
redis.call(ARGV[2], KEYS[3], removed)
return removed
