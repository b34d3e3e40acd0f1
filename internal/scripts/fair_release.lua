-- fair_release.lua: give back an owner's hold on a fair lock (Redisson
-- FairLock layout). Runs after fair_queue.lua. The Client counts
-- re-entries, so this runs once, for the last Unlock; freeing the lock
-- wakes the head waiter only, on its own channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[3]  the waiters' deadlines (redisson_lock_timeout:{name})
-- KEYS[4]  the waiters' channel prefix (redisson_lock__channel:{name}); a
--          waiter's channel is <prefix>:<owner>
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  owner
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  fair wait timeout in milliseconds
--
-- Returns 1 when the lock was freed, -1 when this owner did not hold it
-- (also what a command re-sent after a lost reply finds; the Client knows
-- it re-sent and reads that as released).
if redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; its head waiter may still be asleep.
    local now = nowMillis()
    local head, deadline = purge(KEYS[2], KEYS[3], now, nil)
    wakeHead(KEYS[3], KEYS[4], now, tonumber(ARGV[4]), ARGV[1], ARGV[3], head, deadline, 0)
  end
  return -1
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0 -- another owner's field, written by hand: leave it
end
local now = nowMillis()
local head, deadline = purge(KEYS[2], KEYS[3], now, nil)
wakeHead(KEYS[3], KEYS[4], now, tonumber(ARGV[4]), ARGV[1], ARGV[3], head, deadline, 0)
return 1
