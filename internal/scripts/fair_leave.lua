-- fair_leave.lua: take a waiter that stopped waiting out of a fair lock's
-- queue (Redisson's acquireFailed). Runs after fair_queue.lua. The waiters
-- behind it move up one place, so their deadlines do not drift (Redisson
-- #1104, #2099); if it was the head of a free lock, the next head is woken
-- in its place. Running it twice changes nothing more, so it needs no latch.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[3]  the waiters' deadlines (redisson_lock_timeout:{name})
-- KEYS[4]  the waiters' channel prefix (redisson_lock__channel:{name})
-- ARGV[1]  owner
-- ARGV[2]  fair wait timeout in milliseconds
-- ARGV[3]  message to wake a waiter with ("0")
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  "1" to wake the owner itself on its channel: another waiter
--          takes it out for dead, and should it be alive after all, it
--          attempts again at once (joining at the tail) instead of
--          sleeping out its timer; absent when the owner leaves itself
--
-- Returns 1 when the owner was in the queue, 2 when it was not but holds
-- the lock (a release handed it over), 0 otherwise.
local wait = tonumber(ARGV[2])
local queue = redis.call('lrange', KEYS[2], 0, -1)
redis.call('zrem', KEYS[3], ARGV[1])
local at
for i, w in ipairs(queue) do
  if w == ARGV[1] then
    at = i
    break
  end
end
if not at then
  if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    return 2 -- a release handed the lock over to it (fair_release.lua)
  end
  return 0
end
redis.call('lrem', KEYS[2], 0, ARGV[1])
if ARGV[5] == '1' then
  redis.call(ARGV[4], KEYS[4] .. ':' .. ARGV[1], ARGV[3])
end
if at < #queue then
  local behind = {}
  for i = at + 1, #queue do
    behind[queue[i]] = true
  end
  shiftAll(KEYS[3], -wait, behind, nil)
end
if at == 1 and redis.call('exists', KEYS[1]) == 0 then
  local now = nowMillis()
  local head, deadline = purge(KEYS[2], KEYS[3], now, nil)
  wakeHead(KEYS[3], KEYS[4], now, wait, ARGV[3], ARGV[4], head, deadline, 0)
end
return 1
