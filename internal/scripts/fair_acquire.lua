-- fair_acquire.lua: one attempt at a fair lock (Redisson FairLock layout).
-- Runs after fair_queue.lua.
--
-- KEYS[1]  the lock hash: field <owner> -> hold count
-- KEYS[2]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[3]  the waiters' deadlines (redisson_lock_timeout:{name})
-- KEYS[4]  the fencing token counter (redisson_lock_token:{name})
-- KEYS[5]  the waiters' channel prefix (redisson_lock__channel:{name})
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner, <clientUUID>:<n>
-- ARGV[3]  fair wait timeout in milliseconds
-- ARGV[4]  "1" to join the queue when the lock cannot be taken, "0" not to
--          (TryLock)
-- ARGV[5]  fencing: "-1" none; "0" a first acquisition; T > 0 a re-entry
--          whose previous token was T (see fence in fence.lua)
-- ARGV[6]  message that wakes a waiter ("0")
-- ARGV[7]  publish command: "publish" or "spublish"
-- ARGV[8]  longest sleep, in ms, of the waiter right behind the head
--          while the lock is held (see the end)
-- ARGV[9]  longest sleep, in ms, while the lock is free and another
--          waiter is the head
--
-- Returns {1, token} when the owner holds the lock now (token 0 when not
-- fenced), {0, ms, us} when not: how long to sleep before trying again
-- unless woken, and the server's clock in microseconds (nowMicros: a
-- hand-over message older than that is not a grant), or {0, ms, us, head}
-- when the head waiter stands between the caller
-- and the lock: the head of a free lock's queue, or of a held lock's
-- queue when the caller is right behind it. fair.go checks that head's
-- holder record and takes a dead dlock waiter out of the queue. Running it twice is harmless: a dlock owner's hold count stays 1
-- (the Client counts re-entries), so a re-sent command finds the owner's
-- field and only sets the lease again.
local lease = tonumber(ARGV[1])
local owner = ARGV[2]
local wait = tonumber(ARGV[3])
-- One PTTL says whether the lock is taken (-2: free) and for how long
-- (-1: no TTL).
local pttl = redis.call('pttl', KEYS[1])
local locked = pttl ~= -2
local holds = locked and redis.call('hexists', KEYS[1], owner) == 1
if reentry(ARGV[5]) and not holds then
  return {-2, 0} -- the hold this re-entry is for is gone
end

local function grant(held)
  redis.call('hset', KEYS[1], owner, 1)
  redis.call('pexpire', KEYS[1], lease)
  return {1, fence(KEYS[4], ARGV[5], held)}
end

if holds then
  return grant(true)
end
local micros = nowMicros()
local now = math.floor(micros / 1000)
-- head is the queue's head waiter: read once, after the purge of dead
-- heads while the lock is free; headDeadline its deadline then.
local head, headDeadline, after
if locked then
  head = redis.call('lindex', KEYS[2], 0)
else
  head, headDeadline, after = purge(KEYS[2], KEYS[3], now, owner)
  if not head then
    return grant(false)
  end
  if head == owner then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
    -- The new head gets one wait past the new hold (promote): not less,
    -- or Redisson's scripts would drop it while the lock it waits for is
    -- held; not more, or a dead head would hold the queue up longer.
    promote(KEYS[3], after, now + lease + wait)
    return grant(false)
  end
end

-- second says whether the caller is right behind the head, once known
-- (nil: ask the queue).
local second
-- suspect is the head waiter the caller should check (see Returns), or
-- nil: the head of a free lock's queue, or of a held lock's queue when
-- the caller is right behind it.
local function suspect()
  if head == owner then
    return nil
  end
  if second == nil and locked then
    second = redis.call('lindex', KEYS[2], 1) == owner
  end
  if not locked or second then
    return head
  end
  return nil
end

local held = math.max(pttl, 0)
if ARGV[4] ~= '1' then
  return {0, held, micros, suspect()}
end

-- A dlock head keeps itself ahead: it attempts at least every half wait
-- while it waits (see the end), and each of its attempts moves its own
-- deadline, and the queue's behind it (below).
if locked and head and not dlockOwner(head) then
  keepAhead(KEYS[2], KEYS[3], now + held + wait, head)
end
local deadline = redis.call('zscore', KEYS[3], owner)
if not deadline then
  -- Join at the tail, one wait per place past the lock's expiry: the
  -- deadline Redisson's rule gives a queue whose waiters all joined with
  -- the same wait, without reading the last waiter's (see promote). An
  -- owner is unique per Lock, so it is in the list only if it is in the
  -- zset (a command re-sent after a lost reply finds its deadline).
  local n = redis.call('rpush', KEYS[2], owner)
  redis.call('zadd', KEYS[3], now + held + n * wait, owner)
  if n == 1 then
    head = owner
  end
  second = n == 2
else
  -- A live waiter: its deadline stays at least one wait past the lock's
  -- expiry, and the waiters behind it keep their distance.
  local delta = now + held + wait - tonumber(deadline)
  if delta > 0 then
    local behind = {}
    local found = false
    for _, w in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do
      found = found or w == owner
      if found then
        behind[w] = true
      end
    end
    behind[owner] = true
    shiftAll(KEYS[3], delta, behind)
    if not found then
      redis.call('rpush', KEYS[2], owner) -- in the zset only: make it whole
    end
  end
end

-- How long to sleep. While the lock is held: until the holder's lease
-- runs out (its release wakes the head). The waiter right behind the head
-- sleeps at most ARGV[8]: a Redisson head that gives up (tryLock's
-- waitTime ran out) leaves the queue without a word, and if the lock was
-- freed meanwhile, the new head would sleep out the old lease. While the
-- lock is free and another waiter is the head: that head is told again
-- (it may be a Java thread that missed its message, or gone) unless it
-- was told within ARGV[9], and the caller looks again within ARGV[9], and
-- by the head's deadline, when it is skipped. A waiter tries at least
-- every half wait, which keeps its deadline ahead, and at least once per
-- lease, in case the head took the lock and died holding it.
local ttl
local named = suspect()
if locked then
  ttl = pttl
  if ttl < 0 then
    ttl = wait
  end
  if named then
    ttl = math.min(ttl, tonumber(ARGV[8]))
  end
else
  local quiet = tonumber(ARGV[9])
  wakeHead(KEYS[3], KEYS[5], now, wait, ARGV[6], ARGV[7], head, headDeadline, quiet)
  ttl = math.min(math.min(headDeadline, now + wait) - now, lease, quiet)
end
return {0, math.max(1, math.min(ttl, math.floor(wait / 2))), micros, named}
