-- fence.lua: the fencing token rule and the re-entry rule, put in front
-- of the acquire scripts.
--
-- An acquire script's fencing argument also says whether the attempt is a
-- re-entry: "-1" not fenced, "-3" not fenced and a re-entry, "0" a fenced
-- first acquisition, "-2" a fenced re-entry without a previous token, T > 0
-- a fenced re-entry whose previous token was T, "-4" a fenced first
-- acquisition that takes a new token even when it finds the owner's field
-- (a fair lock's: a release may have handed it the lock without a token).

-- reentry reports whether the attempt re-enters a hold the owner has. A
-- re-entry only confirms that hold: when the owner's field is gone the
-- hold was lost (deleted, expired, maybe taken and released by another
-- owner since), and taking the lock afresh would hide that from the outer
-- holds; the script answers {-2, 0} instead.
local function reentry(arg)
  local n = tonumber(arg)
  return n == -3 or n == -2 or n > 0
end

-- fenced reports whether the acquisition takes a token.
local function fenced(arg)
  local n = tonumber(arg)
  return n ~= -1 and n ~= -3
end

-- nextToken takes the next fencing token from counter and leaves it there:
-- one above the counter, and at least the server's clock in microseconds
-- since the epoch (TIME). The clock is the floor that a failover cannot
-- take back: a promoted replica that never received the last increments
-- still hands out tokens above them, as long as its clock is not behind
-- the old master's by more than the failover took (docs/safety.md). The
-- counter keeps the last token, so that Redisson's FencedLock, which INCRs
-- it, continues above it. INCRBY keeps the arithmetic in Redis's 64-bit
-- integers; Lua's doubles are exact up to 2^53, far above the clock.
local function nextToken(counter)
  local now = redis.call('time')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local current = tonumber(redis.call('get', counter) or '0')
  if current < floor then
    return redis.call('incrby', counter, floor - current)
  end
  return redis.call('incr', counter)
end

-- counterAt returns counter's value, after raising it to last when it is
-- below: last is the owner's previous token on a fenced re-entry (0 or
-- below otherwise). A counter below a token its owner still holds was
-- lost: deleted (Redisson's delete() does), or set back by a failover that
-- lost its last increments. The re-entry's token must still come above
-- the owner's own, or the owner's next fenced write is refused, or
-- carries token 0.
local function counterAt(counter, last)
  local current = tonumber(redis.call('get', counter) or '0')
  if current < last then
    redis.call('set', counter, last)
  end
  return current
end

-- fence returns the token of an acquisition: 0 when arg is "-1" (not
-- fenced), else a token above every earlier one, taken from counter
-- (nextToken). held says whether the owner's field was there before this
-- run. A first acquisition (arg "0") that finds its field is a command
-- re-sent after a lost reply, whose first run took the token: the counter
-- holds it. A re-entry (arg T, the owner's previous token) that finds the
-- counter above T is re-sent too, for the same reason: while the owner
-- holds the lock nobody else can take a token. A re-entry that finds the
-- counter below T (lost: counterAt) takes one above T. A re-entry with no
-- previous token (arg "-2") takes one, and so does "-4".
local function fence(counter, arg, held)
  if not fenced(arg) then
    return 0
  end
  local last = tonumber(arg)
  local current = counterAt(counter, last)
  if (last == 0 and held and current > 0) or (last > 0 and current > last) then
    return current
  end
  return nextToken(counter)
end
