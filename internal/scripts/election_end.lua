-- election_end.lua: end a leadership (Resign, or its loss found by the
-- leader's Client) and tell observers that there is no leader after it.
--
-- KEYS[1]  the election record
-- KEYS[2]  the election channel
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its fencing token
-- ARGV[3]  publish command
--
-- Deletes the record if it is still this leadership's, and publishes the
-- end in any case: an observer that saw a later leader drops it (its
-- token is older). Returns 1 when the record was deleted.
local deleted = 0
if redis.call('hget', KEYS[1], 'owner') == ARGV[1] and redis.call('hget', KEYS[1], 'token') == ARGV[2] then
  redis.call('del', KEYS[1])
  deleted = 1
end
redis.call(ARGV[3], KEYS[2], cjson.encode({owner = ARGV[1], token = ARGV[2], ended = '1'}))
return deleted
