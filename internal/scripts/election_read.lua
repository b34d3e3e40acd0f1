-- election_read.lua: the current leader (Leader, and Observe's reads).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the election record
--
-- Returns {pttl, field, value, ...}: the record's fields and how long the
-- leadership has left (the lock's PTTL: the record outlives it by a keep
-- interval), or {-2} when there is no leader: no record, or a record whose
-- owner no longer holds the lock.
local flat = redis.call('hgetall', KEYS[2])
if #flat == 0 then
  return {-2}
end
local owner
for i = 1, #flat, 2 do
  if flat[i] == 'owner' then
    owner = flat[i + 1]
  end
end
if not owner or redis.call('hexists', KEYS[1], owner) == 0 then
  return {-2}
end
local out = {redis.call('pttl', KEYS[1])}
for i = 1, #flat do
  out[i + 1] = flat[i]
end
return out
