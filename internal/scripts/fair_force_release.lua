-- fair_force_release.lua: delete a fair lock whoever holds it and wake its
-- head waiter (Redisson FairLock forceUnlock). Runs after fair_queue.lua.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[3]  the waiters' deadlines (redisson_lock_timeout:{name})
-- KEYS[4]  the waiters' channel prefix (redisson_lock__channel:{name})
-- KEYS[5]  this request's latch: a re-sent command must not delete a lock
--          someone took in between
-- ARGV[1]  message to wake the head with ("0")
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  fair wait timeout in milliseconds
-- ARGV[4]  latch lifetime in milliseconds
--
-- Returns 1 when a lock was deleted, 0 when there was none.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
  local now = nowMillis()
  local head, deadline = purge(KEYS[2], KEYS[3], now, nil)
  wakeHead(KEYS[3], KEYS[4], now, tonumber(ARGV[3]), ARGV[1], ARGV[2], head, deadline, 0)
end
redis.call('set', KEYS[5], deleted, 'px', ARGV[4])
return deleted
