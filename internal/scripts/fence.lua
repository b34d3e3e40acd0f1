-- fence.lua: the fencing token rule, put in front of the acquire scripts
-- of exclusive locks (the plain, fair and write locks).

-- fence returns the token of an acquisition: 0 when arg is "-1" (not
-- fenced), else a token above every earlier one, taken from counter. held
-- says whether the owner's field was there before this run. A first
-- acquisition (arg "0") that finds its field is a command re-sent after a
-- lost reply, whose first run took the token: the counter holds it. A
-- re-entry (arg T, the owner's previous token) increments only a counter
-- still at T, for the same reason: while the owner holds the lock nobody
-- else can. A re-entry with no previous token (arg "-2") increments.
local function fence(counter, arg, held)
  local last = tonumber(arg)
  if last == -1 then
    return 0
  end
  if last >= 0 then
    local current = tonumber(redis.call('get', counter) or '0')
    if (last == 0 and held) or (last > 0 and current ~= last) then
      return current
    end
  end
  return redis.call('incr', counter)
end

