-- token_raise.lua: RedLock fencing, second round. Raise one node's fencing
-- token counter to the token the owner took across the quorum, but only
-- while the owner still holds the lock on this node: a later owner can take
-- this node only after that, and its INCR then yields more than the token.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fencing token counter (redisson_lock_token:{name})
-- ARGV[1]  owner field
-- ARGV[2]  the token (the maximum of the quorum's INCR results)
--
-- Returns 1 when the owner holds the lock here (the counter is now at least
-- the token), 0 when it does not (nothing changed).
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local current = tonumber(redis.call('get', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[2])
end
return 1
