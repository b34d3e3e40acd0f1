-- election_keep.lua: keep the election record alive while the owner
-- leads.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the election record
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its fencing token
-- ARGV[3]  how long the record outlives the lock's TTL, in ms (one keep
--          interval: the record must not expire before the next keep)
--
-- Returns 1 when the record's expiry was set to the lock's remaining TTL
-- plus ARGV[3], 0 when the owner no longer holds the lock, -1 when it
-- still holds the lock but the record is gone or not its own (the caller
-- must give the lock back: nobody else can lead while it is held).
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('hget', KEYS[2], 'owner') ~= ARGV[1]
    or redis.call('hget', KEYS[2], 'token') ~= ARGV[2] then
  return -1
end
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
  redis.call('pexpire', KEYS[2], ttl + tonumber(ARGV[3]))
end
return 1
