-- latch_delete.lua: delete a latch and, if there was one, publish 1
-- (Redisson RCountDownLatch.delete).
-- KEYS[1] latch, KEYS[2] its channel
-- ARGV[1] publish or spublish
-- Returns 1 if a latch was deleted, else 0.
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[1], KEYS[2], 1)
  return 1
end
return 0
