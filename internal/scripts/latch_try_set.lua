-- latch_try_set.lua: set a count-down latch's count if it has none, and
-- publish 1, the new-count message (Redisson RCountDownLatch.trySetCount).
-- KEYS[1] latch (string integer), KEYS[2] its channel
-- redisson_countdownlatch__channel__{name}
-- ARGV[1] count (> 0), ARGV[2] publish or spublish
-- Returns 1 if set, 0 if the latch already had a count.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call(ARGV[2], KEYS[2], 1)
  return 1
end
return 0
