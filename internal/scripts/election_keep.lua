-- election_keep.lua: keep the election record as long as the lock, while
-- the owner leads.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the election record
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its fencing token
--
-- Returns 1 when the record's expiry was set to the lock's, 0 when the
-- owner no longer leads (its lock or its record is gone).
if redis.call('hexists', KEYS[1], ARGV[1]) == 1
    and redis.call('hget', KEYS[2], 'owner') == ARGV[1]
    and redis.call('hget', KEYS[2], 'token') == ARGV[2] then
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return 1
end
return 0
