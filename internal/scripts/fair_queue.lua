-- fair_queue.lua: the waiting-queue rules every fair-lock script shares
-- (Redisson FairLock layout). scripts.go puts this file in front of each
-- fair_*.lua script, which then calls these local functions.
--
-- The queue is a list of owners (redisson_lock_queue:{name}) and a zset of
-- their deadlines (redisson_lock_timeout:{name}: owner -> absolute time in
-- ms). A waiter's deadline is when the others may skip it as dead. As in
-- Redisson, a waiter joins one fair wait timeout per place in the queue
-- past the lock's expiry (Redisson counts from the last waiter's
-- deadline), everyone behind a waiter that leaves moves up by one wait,
-- and a dead head is dropped once its deadline has passed. Unlike
-- Redisson, a live waiter pushes its deadline forward each time it tries,
-- so a long hold does not get the waiters behind it dropped (Redisson
-- #3004), and a grant moves only the new head's deadline (promote), not
-- the whole queue's.

-- nowMillis is the Redis server's clock in milliseconds. Redisson passes
-- the client's clock instead; one clock for every client keeps deadlines
-- written by different hosts comparable.
local function nowMillis()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- nowMicros is the Redis server's clock in microseconds: the sequence of
-- a hand-over message (fair_release.lua) and of an attempt that found the
-- lock taken (fair_acquire.lua). Scripts run one at a time, so of two
-- runs on one server the later reads the later clock; a waiter takes a
-- hand-over only if it ran after its latest attempt that found the lock
-- taken (fair.go, handedOver). Lua's doubles hold it exactly (2^53 us is
-- in the year 2255).
local function nowMicros()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- purge drops dead waiters from the head of the queue, and returns the
-- head left (nil for none) with its deadline (nil when it is the caller).
-- Callers run it only while the lock is free: a head cannot take a held
-- lock anyway, so dropping it then gains nothing and could drop a live
-- one. caller (nil for none) is alive by definition and ends the purge;
-- when it is the head, the waiter right behind it comes third (nil for
-- none), read with the head: the new head once the caller takes the lock.
-- A head without a deadline is dropped too rather than compared with nil.
local function purge(queue, deadlines, now, caller)
  while true do
    local head, after
    if caller then
      local two = redis.call('lrange', queue, 0, 1)
      head, after = two[1], two[2]
    else
      head = redis.call('lindex', queue, 0)
    end
    if not head or head == caller then
      return head, nil, after
    end
    local deadline = redis.call('zscore', deadlines, head)
    if deadline and tonumber(deadline) > now then
      return head, tonumber(deadline)
    end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, head)
  end
end

-- shiftAll adds by ms to the deadline of every waiter, or of the waiters
-- in the set only (nil for all), with one ZADD per 500 waiters rather
-- than a ZINCRBY each: moving the queue costs a few commands, not two per
-- waiter. all is the zset as ZRANGE WITHSCORES returns it, nil to read it.
local function shiftAll(deadlines, by, only, all)
  if by == 0 then
    return
  end
  all = all or redis.call('zrange', deadlines, 0, -1, 'withscores')
  local args = {}
  for i = 1, #all, 2 do
    if not only or only[all[i]] then
      args[#args + 1] = tonumber(all[i + 1]) + by
      args[#args + 1] = all[i]
    end
    if #args >= 1000 then
      redis.call('zadd', deadlines, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('zadd', deadlines, unpack(args))
  end
end

-- dlockOwner reports whether owner is a dlock owner, "<clientID>:<n>"
-- with a lower-case UUID of version 8 and the RFC 9562 variant as the
-- client id (layout.OwnerClientID): a waiter that keeps its own deadline
-- ahead and reads a hand-over message (fair_release.lua). A Redisson
-- owner ("<uuid v4>:<thread id>") is not one.
local hex = '[0-9a-f]'
local dlockOwnerPattern = '^' .. hex:rep(8) .. '%-' .. hex:rep(4) .. '%-8' .. hex:rep(3) ..
  '%-[89ab]' .. hex:rep(3) .. '%-' .. hex:rep(12) .. ':%d+$'
local function dlockOwner(owner)
  return string.find(owner, dlockOwnerPattern) ~= nil
end

-- keepAhead keeps the head's deadline at least floor, moving every
-- waiter's deadline as far forward and keeping their distances. head is
-- the queue's head, nil to read it. The floor applies while the lock is
-- held: nobody in the queue can take it before it is freed, so every
-- waiter counts as alive until then. Redisson's scripts drop a head whose
-- deadline has passed even while the lock is held, on the Java client's
-- clock, and its tryLock(waitTime) waiters join with their own waitTime;
-- without the floor, a live Java waiter would drop itself and join again
-- at the tail, behind dlock waiters that came after it. Only the head's
-- deadline is read unless the queue moves.
local function keepAhead(queue, deadlines, floor, head)
  head = head or redis.call('lindex', queue, 0)
  if not head then
    return
  end
  local first = redis.call('zscore', deadlines, head)
  if first then
    shiftAll(deadlines, math.max(0, floor - tonumber(first)), nil, nil)
  end
end

-- promote gives head, the queue's new head (nil for none) after a waiter
-- took the lock from the head, the deadline deadline (one wait past the new hold): one ZADD,
-- however long the queue. Redisson moves every waiter up by one wait
-- instead; dlock leaves the others where they are, which is later than
-- Redisson's rule would put them, never earlier. That costs nothing: a
-- deadline is read for the head only (the purge, Redisson's too), and
-- each waiter gets its own again as it becomes the head (here, at the
-- wake-up of a release, or by one wait per Java grant). A joiner's
-- deadline counts from the lock's expiry and its place (fair_acquire.lua),
-- not from the last waiter's, so nothing drifts (Redisson #1104, #2099).
local function promote(deadlines, head, deadline)
  if head then
    redis.call('zadd', deadlines, deadline, head)
  end
end

-- wakeHead tells the head waiter (head, with its deadline, as purge
-- returned them; nil for none), on its own channel, that the lock is free,
-- and gives it at most wait ms from now to take it: a head that died holds
-- the queue up for no longer than that after an unlock. A head told so
-- less than quiet ms ago (its deadline says so) is not told again: a
-- waiter that finds the lock free right after an unlock must not wake the
-- head twice (each wake-up costs it an attempt).
local function wakeHead(deadlines, channelPrefix, now, wait, message, publish, head, deadline, quiet)
  if not head then
    return
  end
  if deadline and deadline <= now + wait and deadline > now + wait - quiet then
    return
  end
  if not deadline or deadline > now + wait then
    redis.call('zadd', deadlines, now + wait, head)
  end
  redis.call(publish, channelPrefix .. ':' .. head, message)
end
