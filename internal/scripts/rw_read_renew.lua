-- rw_read_renew.lua: the watchdog's batched renewal of read holds. It
-- renews the hold keys of the owners it is given and no others: renewing
-- every reader's keys kept dead readers alive (Redisson PR #7098). It also
-- keeps the lock hash alive as long as each hold: a Java reader's renewal
-- sets the hash's TTL to its own watchdog timeout, shorter maybe than a
-- dlock read hold, and a writer could get in once the hash expired.
--
-- KEYS[2i-1]  lock hash of hold i
-- KEYS[2i]    hold-key prefix of hold i's owner ({name}:<owner>:rwlock_timeout)
-- ARGV[1]     lease in milliseconds; 0 for holds with a fixed lease, whose
--             hold keys are not renewed
-- ARGV[2i]    the owner of hold i
-- ARGV[2i+1]  how long, in milliseconds, the hash must live for hold i
--
-- Returns one entry per hold: 1 renewed, 0 the owner no longer holds a read
-- lock.
local lease = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local lock, prefix = KEYS[2 * i - 1], KEYS[2 * i]
  local n = tonumber(redis.call('hget', lock, ARGV[2 * i]))
  if n and n > 0 then
    if lease > 0 then
      for k = 1, n do
        redis.call('pexpire', prefix .. ':' .. k, lease)
      end
    end
    -- Never shorten the lock below another reader's longer lease.
    local keep = tonumber(ARGV[2 * i + 1])
    if keep > 0 and redis.call('pttl', lock) < keep then
      redis.call('pexpire', lock, keep)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
