-- lock_renew.lua: the watchdog's batched lease renewal for hash locks.
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in milliseconds; 0 for holds with a fixed lease, which
--            are only checked
-- ARGV[i+1]  the owner field that must still hold KEYS[i]
--
-- Returns one entry per key: 1 renewed, 0 the owner no longer holds it.
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    if ARGV[1] ~= '0' then
      redis.call('pexpire', KEYS[i], ARGV[1])
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
