-- latch_count_down.lua: count a latch down by one; at 0 or below the key
-- is deleted, and at exactly 0 the zero message 0 is published (Redisson
-- RCountDownLatch.countDown). A missing latch stays missing.
-- KEYS[1] latch, KEYS[2] its channel
-- ARGV[1] publish or spublish
-- Returns the count after the call (0 when the latch is open).
local v = redis.call('decr', KEYS[1])
if v <= 0 then
  redis.call('del', KEYS[1])
end
if v == 0 then
  redis.call(ARGV[1], KEYS[2], 0)
end
return math.max(v, 0)
