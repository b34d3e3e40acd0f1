-- election_proclaim.lua: set the leader's value, and tell observers.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the election record
-- KEYS[3]  the election channel
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its fencing token
-- ARGV[3]  publish command
-- ARGV[4]  the new value
--
-- Returns the record's new proclaim counter (seq), -1 when the owner no
-- longer holds the lock, or -2 when it holds the lock but the record is
-- gone or not its own (the caller must give the lock back). Not
-- idempotent: sent once.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if redis.call('hget', KEYS[2], 'owner') ~= ARGV[1]
    or redis.call('hget', KEYS[2], 'token') ~= ARGV[2] then
  return -2
end
local seq = redis.call('hincrby', KEYS[2], 'seq', 1)
redis.call('hset', KEYS[2], 'value', ARGV[4])
announce(KEYS[2], KEYS[3], ARGV[3])
return seq
