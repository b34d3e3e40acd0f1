-- fenced_write.lua: write a value only if the writer's fencing token is
-- not below the highest token a fenced write to it has carried (dlock's
-- FencedSet and FencedHSet). The token is kept beside the value, so the
-- check and the write are one step on the server that keeps the data,
-- whichever Redis the lock lives on.
--
-- KEYS[1]  the value's key
-- KEYS[2]  the token kept beside it (<key>:dlock_fence, same hash slot)
-- ARGV[1]  the writer's token, a positive integer up to 2^53 (Lua's
--          numbers are doubles; dlock refuses larger ones before this)
-- ARGV[2]  "set" or "hset"
-- ARGV[3]  set: the lifetime in milliseconds, "0" for none; hset: unused
-- ARGV[4…] set: the value; hset: field, value, field, value…
--
-- Returns {1, last} when written, {0, last} when refused (last is the
-- highest token seen before, 0 for none). An equal token is the same
-- holder writing again (tokens are unique per acquisition) and is let
-- through. The token key has no lifetime: it is the resource's memory of
-- the newest holder, and forgetting it would let a stale one in.
--
-- The data is written first and the token last: Redis does not undo a
-- script's writes when a later command fails, so a write that fails
-- (the key holds another type) must fail before the token is raised,
-- or it would lock out the holders of the tokens in between for nothing.
local last = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[1]) < last then
  return {0, last}
end
if ARGV[2] == 'set' then
  if ARGV[3] == '0' then
    redis.call('set', KEYS[1], ARGV[4])
  else
    redis.call('set', KEYS[1], ARGV[4], 'px', ARGV[3])
  end
else
  -- unpack is bounded by Lua's C stack (about 8000 values): write the
  -- pairs 500 at a time. Only the first HSET can fail on the key's type,
  -- before anything is written.
  for i = 4, #ARGV, 1000 do
    redis.call('hset', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
redis.call('set', KEYS[2], ARGV[1])
return {1, last}
