-- client_seen.lua: whether a dlock Client's holder record is known to have
-- existed: its id is in the seen set, which each record refresh writes.
-- Read on the master, like client_exists.lua.
--
-- KEYS[1]  the seen set (dlock:client:seen)
-- ARGV[1]  the client id
--
-- Returns 1 when the id is in the set, 0 when not.
if redis.call('zscore', KEYS[1], ARGV[1]) then
  return 1
end
return 0
