-- fair_release.lua: release one hold of a fair lock (Redisson FairLock
-- layout). Runs after fair_queue.lua. The last release wakes the head
-- waiter only, on its own channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[3]  the waiters' deadlines (redisson_lock_timeout:{name})
-- KEYS[4]  the waiters' channel prefix (redisson_lock__channel:{name}); a
--          waiter's channel is <prefix>:<owner>
-- KEYS[5]  this request's latch (redisson_unlock_latch:{name}:<requestId>)
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  lease in milliseconds, set again when holds remain
-- ARGV[3]  owner
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  latch lifetime in milliseconds
-- ARGV[6]  fair wait timeout in milliseconds
--
-- Returns 1 when the lock was freed, 0 when this owner still holds it, -1
-- when this owner did not hold it. A re-sent command returns the first
-- answer again instead of releasing twice.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local now = nowMillis()
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; its head waiter may still be asleep.
    purge(KEYS[1], KEYS[2], KEYS[3], now, nil)
    wakeHead(KEYS[2], KEYS[3], KEYS[4], now, tonumber(ARGV[6]), ARGV[1], ARGV[4])
  end
  return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[5], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
purge(KEYS[1], KEYS[2], KEYS[3], now, nil)
wakeHead(KEYS[2], KEYS[3], KEYS[4], now, tonumber(ARGV[6]), ARGV[1], ARGV[4])
redis.call('set', KEYS[5], 1, 'px', ARGV[5])
return 1
