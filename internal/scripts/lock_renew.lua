-- lock_renew.lua: the watchdog's batched lease renewal for hash locks.
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  the owner field that must still hold KEYS[i]
--
-- Returns one entry per key: 1 renewed, 0 the owner no longer holds it.
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
