-- fence.lua: the fencing token rule and the re-entry rule, put in front
-- of the acquire scripts.
--
-- An acquire script's fencing argument also says whether the attempt is a
-- re-entry: "-1" not fenced, "-3" not fenced and a re-entry, "0" a fenced
-- first acquisition, "-2" a fenced re-entry without a previous token, T > 0
-- a fenced re-entry whose previous token was T.

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

-- fence returns the token of an acquisition: 0 when arg is "-1" (not
-- fenced), else a token above every earlier one, taken from counter. held
-- says whether the owner's field was there before this run. A first
-- acquisition (arg "0") that finds its field is a command re-sent after a
-- lost reply, whose first run took the token: the counter holds it. A
-- re-entry (arg T, the owner's previous token) increments only a counter
-- still at T, for the same reason: while the owner holds the lock nobody
-- else can. A re-entry with no previous token (arg "-2") increments.
local function fence(counter, arg, held)
  if not fenced(arg) then
    return 0
  end
  local last = tonumber(arg)
  if last >= 0 then
    local current = tonumber(redis.call('get', counter) or '0')
    if (last == 0 and held) or (last > 0 and current ~= last) then
      return current
    end
  end
  return redis.call('incr', counter)
end

