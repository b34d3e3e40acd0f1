-- election_elect.lua: record a new leader, once its Campaign holds the
-- election's lock, and tell observers.
--
-- KEYS[1]  the lock hash (the election's name)
-- KEYS[2]  the election record (dlock:election:{name})
-- KEYS[3]  the election channel (dlock:election:channel:{name})
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its fencing token
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  how long the record outlives the lock's TTL, in ms (one keep
--          interval: the record must not expire before the first keep)
-- ARGV[5..16] field, value pairs: value, since, host, pid, program, name
-- (the transport may add an argument after them, which is ignored)
--
-- Returns 1, or 0 when the owner no longer holds the lock. The record
-- expires one keep interval after the lock would (its PTTL now); the
-- leader's Client keeps it as long as it keeps the lock, and readers trust
-- it only while its owner holds the lock. Running it twice publishes twice, with the
-- same revision: observers drop the second.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('del', KEYS[2])
redis.call('hset', KEYS[2], 'owner', ARGV[1], 'token', ARGV[2], 'seq', '0', unpack(ARGV, 5, 16))
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
  redis.call('pexpire', KEYS[2], ttl + tonumber(ARGV[4]))
end
announce(KEYS[2], KEYS[3], ARGV[3])
return 1
