-- fenced_write.lua: write a value only if the writer's fencing token is
-- above the highest token a fenced write to it has carried, or equal to it
-- and from the same holder (dlock's FencedSet and FencedHSet). The token is kept beside the value, so the
-- check and the write are one step on the server that keeps the data,
-- whichever Redis the lock lives on.
--
-- KEYS[1]  the value's key
-- KEYS[2]  the token and its holder kept beside it, "<token> <holder>"
--          (<key>:dlock_fence, same hash slot)
-- ARGV[1]  the writer's token, a positive integer up to 2^53 (Lua's
--          numbers are doubles; dlock refuses larger ones before this)
-- ARGV[2]  the writer's holder (its lock's owner), not empty
-- ARGV[3]  "set" or "hset"
-- ARGV[4]  set: the lifetime in milliseconds, "0" for none; hset: unused
-- ARGV[5…] set: the value; hset: field, value, field, value…
--
-- Returns {1, last} when written, {0, last} when refused (last is the
-- highest token seen before, 0 for none). An equal token from the same
-- holder is that holder writing again and is let through; from another
-- holder it is the same token granted twice (two masters of a split
-- brain, in the same microsecond) and is refused. A fence key written by
-- an earlier dlock holds the token alone: its holder is unknown, and an
-- equal token is refused. The token key has no lifetime: it is the
-- resource's memory of the newest holder, and forgetting it would let a
-- stale one in.
--
-- The data is written first and the token last: Redis does not undo a
-- script's writes when a later command fails, so a write that fails
-- (the key holds another type) must fail before the token is raised,
-- or it would lock out the holders of the tokens in between for nothing.
local fence = redis.call('get', KEYS[2]) or '0'
local sep = string.find(fence, ' ', 1, true)
local last, holder = tonumber(fence), nil
if sep then
  last, holder = tonumber(string.sub(fence, 1, sep - 1)), string.sub(fence, sep + 1)
end
local token = tonumber(ARGV[1])
if token < last or (token == last and holder ~= ARGV[2]) then
  return {0, last}
end
if ARGV[3] == 'set' then
  if ARGV[4] == '0' then
    redis.call('set', KEYS[1], ARGV[5])
  else
    redis.call('set', KEYS[1], ARGV[5], 'px', ARGV[4])
  end
else
  -- unpack is bounded by Lua's C stack (about 8000 values): write the
  -- pairs 500 at a time. Only the first HSET can fail on the key's type,
  -- before anything is written.
  for i = 5, #ARGV, 1000 do
    redis.call('hset', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
redis.call('set', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return {1, last}
