-- rw_read_renew.lua: the watchdog's batched renewal of read holds. It
-- renews the hold keys of the owners it is given and no others: renewing
-- every reader's keys kept dead readers alive (Redisson PR #7098).
--
-- KEYS[2i-1]  lock hash of hold i
-- KEYS[2i]    hold-key prefix of hold i's owner ({name}:<owner>:rwlock_timeout)
-- ARGV[1]     lease in milliseconds
-- ARGV[i+1]   the owner of hold i
--
-- Returns one entry per hold: 1 renewed, 0 the owner no longer holds a read
-- lock.
local lease = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local lock, prefix = KEYS[2 * i - 1], KEYS[2 * i]
  local n = tonumber(redis.call('hget', lock, ARGV[i + 1]))
  if n and n > 0 then
    for k = 1, n do
      redis.call('pexpire', prefix .. ':' .. k, lease)
    end
    -- Never shorten the lock below another reader's longer lease.
    if redis.call('pttl', lock) < lease then
      redis.call('pexpire', lock, lease)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
