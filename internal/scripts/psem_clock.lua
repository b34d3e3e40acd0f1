-- psem_clock.lua: the clock of every permit-semaphore script that reads
-- the time; sync.go puts this file in front of them.
--
-- now is the Redis server's clock in epoch ms, read once per script
-- (TIME; effects replication, the default since Redis 7, replicates the
-- writes it leads to, not the script). Expiries are written and permits
-- reclaimed on this one clock: a client whose wall clock is ahead can no
-- longer reclaim the permits other clients still hold. ARGV[1] is the
-- caller's wall clock in epoch ms; no script reads it. Redisson's Java
-- client still writes expiries on its own clock, in its own scripts: they
-- are compared with the server's here, so keep the Java hosts' clocks in
-- sync with the server's (NTP).
local now = (function()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end)()

-- expiry is the score of a permit leased for lease ms (a decimal string)
-- from now: now + lease, or Redisson's no-expiry score 922337203685477 for
-- lease '-1' (a permit without lease).
local function expiry(lease)
  if lease == '-1' then
    return '922337203685477'
  end
  return now + tonumber(lease)
end
