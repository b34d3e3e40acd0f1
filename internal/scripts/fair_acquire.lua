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
-- fenced), {0, ms} when not: how long to sleep before trying again unless
-- woken, or {0, ms, head} when the head waiter stands between the caller
-- and the lock: the head of a free lock's queue, or of a held lock's
-- queue when the caller is right behind it. fair.go checks that head's
-- holder record and takes a dead dlock waiter out of the queue. Running it twice is harmless: a dlock owner's hold count stays 1
-- (the Client counts re-entries), so a re-sent command finds the owner's
-- field and only sets the lease again.
local lease = tonumber(ARGV[1])
local owner = ARGV[2]
local wait = tonumber(ARGV[3])
if reentry(ARGV[5]) and redis.call('hexists', KEYS[1], owner) == 0 then
  return {-2, 0} -- the hold this re-entry is for is gone
end
local now = nowMillis()
purge(KEYS[1], KEYS[2], KEYS[3], now, owner)

-- suspect is the head waiter the caller should check (see Returns), or
-- nil.
local function suspect()
  local head = redis.call('lindex', KEYS[2], 0)
  if not head or head == owner then
    return nil
  end
  if redis.call('exists', KEYS[1]) == 0 or redis.call('lindex', KEYS[2], 1) == owner then
    return head
  end
  return nil
end

local function grant(held)
  redis.call('hset', KEYS[1], owner, 1)
  redis.call('pexpire', KEYS[1], lease)
  return {1, fence(KEYS[4], ARGV[5], held)}
end

if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    return grant(false)
  end
  if head == owner then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], owner)
    -- Everyone moves up one place (Redisson's rule) ...
    for _, w in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
      redis.call('zincrby', KEYS[3], -wait, w)
    end
    -- ... but no further than the new hold allows: waiters that joined
    -- with a shorter wait (a Java tryLock's waitTime) must not go stale
    -- while the lock they wait for is held.
    keepAlive(KEYS[2], KEYS[3], now + lease + wait)
    return grant(false)
  end
elseif redis.call('hexists', KEYS[1], owner) == 1 then
  return grant(true)
end

local held = math.max(redis.call('pttl', KEYS[1]), 0) -- -2 free, -1 no TTL
if ARGV[4] ~= '1' then
  return {0, held, suspect()}
end

local locked = redis.call('exists', KEYS[1]) == 1
if locked then
  keepAlive(KEYS[2], KEYS[3], now + held + wait)
end
local deadline = redis.call('zscore', KEYS[3], owner)
if not deadline then
  -- Join at the tail: one wait after the last waiter's deadline, and at
  -- least one wait after the lock's expiry.
  local base = now + held
  local last = redis.call('lindex', KEYS[2], -1)
  if last then
    local d = redis.call('zscore', KEYS[3], last)
    if d then
      base = math.max(base, tonumber(d))
    end
  end
  redis.call('lrem', KEYS[2], 0, owner) -- in the list only: join whole
  redis.call('zadd', KEYS[3], base + wait, owner)
  redis.call('rpush', KEYS[2], owner)
else
  -- A live waiter: its deadline stays at least one wait past the lock's
  -- expiry, and the waiters behind it keep their distance.
  local delta = now + held + wait - tonumber(deadline)
  if delta > 0 then
    local behind = false
    for _, w in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do
      behind = behind or w == owner
      if behind then
        redis.call('zincrby', KEYS[3], delta, w)
      end
    end
    if not behind then
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
-- (it may be a Java thread that missed its message, or gone), and the
-- caller looks again within ARGV[9], and by the head's deadline, when it
-- is skipped. A waiter tries at least every half wait, which keeps its
-- deadline ahead, and at least once per lease, in case the head took the
-- lock and died holding it.
local ttl
if locked then
  ttl = redis.call('pttl', KEYS[1])
  if ttl < 0 then
    ttl = wait
  end
  if redis.call('lindex', KEYS[2], 1) == owner then
    ttl = math.min(ttl, tonumber(ARGV[8]))
  end
else
  local head = redis.call('lindex', KEYS[2], 0)
  wakeHead(KEYS[2], KEYS[3], KEYS[5], now, wait, ARGV[6], ARGV[7])
  ttl = math.min(tonumber(redis.call('zscore', KEYS[3], head)) - now, lease, tonumber(ARGV[9]))
end
return {0, math.max(1, math.min(ttl, math.floor(wait / 2))), suspect()}
