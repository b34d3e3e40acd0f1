-- lock_acquire.lua: one attempt to take a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  the lock hash: field <owner> -> hold count
-- KEYS[2]  the fencing token counter (redisson_lock_token:{name})
-- KEYS[3]  this request's latch (makes a re-sent command a no-op)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, <clientUUID>:<n>
-- ARGV[3]  "1" to increment the fencing token, "0" not to
-- ARGV[4]  latch lifetime in milliseconds
--
-- Returns {1, token} when the lock was taken (token 0 when not fenced),
-- {0, pttl} when another owner holds it.
local done = redis.call('get', KEYS[3])
if done then
  return {1, tonumber(done)}
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local token = 0
  if ARGV[3] == '1' then
    token = redis.call('incr', KEYS[2])
  end
  redis.call('set', KEYS[3], token, 'px', ARGV[4])
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
