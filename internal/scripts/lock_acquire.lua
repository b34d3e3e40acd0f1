-- lock_acquire.lua: take a reentrant lock, or confirm the owner has it
-- (Redisson RLock layout).
--
-- KEYS[1]  the lock hash: field <owner> -> hold count
-- KEYS[2]  the fencing token counter (redisson_lock_token:{name})
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, <clientUUID>:<n>
-- ARGV[3]  fencing: "-1" none; "0" a first acquisition; T > 0 a re-entry
--          whose previous token was T (see fence in fence.lua)
--
-- Returns {1, token} when the owner holds the lock now (token 0 when not
-- fenced), {0, pttl} when another owner holds it, {-2, 0} when a re-entry
-- finds the owner's hold gone.
--
-- lock_acquire_free.lua runs first and answers the common case, a first
-- acquisition of a free lock, before fence.lua's functions are made.
--
-- Running it twice is harmless: the hold count of a dlock owner stays 1
-- (the Client counts re-entries), so a command re-sent after a lost reply
-- finds the owner's field and only sets the lease again. Owner names are
-- unique per lock-context chain, so a field that exists is this chain's.
local held = false
if reentry(ARGV[3]) and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {-2, 0}
elseif redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  held = true
else
  return {0, redis.call('pttl', KEYS[1])}
end
redis.call('pexpire', KEYS[1], ARGV[1])
return {1, fence(KEYS[2], ARGV[3], held)}
