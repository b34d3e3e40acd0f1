-- fair_queue.lua: the waiting-queue rules every fair-lock script shares
-- (Redisson FairLock layout). scripts.go puts this file in front of each
-- fair_*.lua script, which then calls these local functions.
--
-- The queue is a list of owners (redisson_lock_queue:{name}) and a zset of
-- their deadlines (redisson_lock_timeout:{name}: owner -> absolute time in
-- ms). A waiter's deadline is when the others may skip it as dead. As in
-- Redisson, each waiter joins with the deadline of the one before it (or the
-- lock's expiry) plus the fair wait timeout, everyone behind a waiter that
-- takes the lock or leaves moves up by one wait, and a dead head is dropped
-- once its deadline has passed. Unlike Redisson, a live waiter pushes its
-- deadline forward each time it tries, so a long hold does not get the
-- waiters behind it dropped (Redisson #3004).

-- nowMillis is the Redis server's clock in milliseconds. Redisson passes
-- the client's clock instead; one clock for every client keeps deadlines
-- written by different hosts comparable.
local function nowMillis()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- purge drops dead waiters from the head of the queue. It only runs while
-- the lock is free: a head cannot take a held lock anyway, so dropping it
-- then gains nothing and could drop a live one. caller (nil for none) is
-- alive by definition and ends the purge. A head without a deadline is
-- dropped too rather than compared with nil.
local function purge(lock, queue, deadlines, now, caller)
  if redis.call('exists', lock) == 1 then
    return
  end
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head or head == caller then
      return
    end
    local deadline = redis.call('zscore', deadlines, head)
    if deadline and tonumber(deadline) > now then
      return
    end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, head)
  end
end

-- keepAlive moves every waiter's deadline forward, keeping their distances,
-- so that the head's is at least floor. It runs while the lock is held:
-- nobody in the queue can take it before it is freed, so every waiter
-- counts as alive until then. Redisson's scripts drop a head whose
-- deadline has passed even while the lock is held, on the Java client's
-- clock, and its tryLock(waitTime) waiters join and move up by their own
-- waitTime; without this, a live Java waiter would drop itself and join
-- again at the tail, behind dlock waiters that came after it.
local function keepAlive(queue, deadlines, floor)
  local waiters = redis.call('lrange', queue, 0, -1)
  if #waiters == 0 then
    return
  end
  local first = redis.call('zscore', deadlines, waiters[1])
  local push = floor - tonumber(first or floor)
  if push <= 0 then
    return
  end
  for _, w in ipairs(waiters) do
    if redis.call('zscore', deadlines, w) then
      redis.call('zincrby', deadlines, push, w)
    end
  end
end

-- wakeHead tells the head waiter, on its own channel, that the lock is free,
-- and gives it at most wait ms from now to take it: a head that died holds
-- the queue up for no longer than that after an unlock.
local function wakeHead(queue, deadlines, channelPrefix, now, wait, message, publish)
  local head = redis.call('lindex', queue, 0)
  if not head then
    return
  end
  local deadline = redis.call('zscore', deadlines, head)
  if not deadline or tonumber(deadline) > now + wait then
    redis.call('zadd', deadlines, now + wait, head)
  end
  redis.call(publish, channelPrefix .. ':' .. head, message)
end

