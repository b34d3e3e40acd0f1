-- lock_acquire_free.lua: the common case of lock_acquire.lua, put in front
-- of fence.lua so that it runs before fence.lua's functions are made (that
-- alone costs about a third of the script's time in Redis): a first
-- acquisition, fenced or not, of a lock nobody holds. KEYS and ARGV are
-- lock_acquire.lua's; so are the replies and what a re-sent command does
-- (it finds the owner's field and goes on to lock_acquire.lua).
if (ARGV[3] == '-1' or ARGV[3] == '0') and redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if ARGV[3] == '-1' then
    return {1, 0}
  end
  -- fence.lua's nextToken, inline: one above the counter and at least
  -- the server's clock in microseconds.
  local now = redis.call('time')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local current = tonumber(redis.call('get', KEYS[2]) or '0')
  if current < floor then
    return {1, redis.call('incrby', KEYS[2], floor - current)}
  end
  return {1, redis.call('incr', KEYS[2])}
end
