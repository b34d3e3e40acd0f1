-- fair_clear.lua: delete a fair lock's waiting queue (dlock clear-queue)
-- and wake every waiter it held on its own channel, so that a live one
-- attempts again at once (joining the queue anew) instead of sleeping out
-- its timer. The lock itself is left as it is.
--
-- KEYS[1]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[2]  the waiters' deadlines (redisson_lock_timeout:{name})
-- ARGV[1]  the waiters' channel prefix (redisson_lock__channel:{name})
-- ARGV[2]  message to wake a waiter with ("0")
-- ARGV[3]  "1" to publish with SPUBLISH as well as PUBLISH (a cluster,
--          where dlock waiters listen on sharded channels and Redisson's
--          on ordinary ones)
--
-- Returns the number of waiters removed.
local waiters = redis.call('lrange', KEYS[1], 0, -1)
local seen = {}
for _, w in ipairs(waiters) do
  seen[w] = true
end
for _, w in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
  if not seen[w] then
    seen[w] = true
    table.insert(waiters, w)
  end
end
redis.call('del', KEYS[1], KEYS[2])
for _, w in ipairs(waiters) do
  local channel = ARGV[1] .. ':' .. w
  redis.call('publish', channel, ARGV[2])
  if ARGV[3] == '1' then
    redis.pcall('spublish', channel, ARGV[2])
  end
end
return #waiters
