-- fair_release.lua: give back an owner's hold on a fair lock (Redisson
-- FairLock layout). Runs after fence.lua and fair_queue.lua. The Client
-- counts re-entries, so this runs once, for the last Unlock; freeing the
-- lock tells the head waiter only, on its own channel.
--
-- When the head is a dlock waiter that listens on its channel, the
-- release hands the lock over to it (handOver): the head holds the lock
-- when it is told, and needs no attempt of its own to take it. A Redisson
-- (Java) head, a dlock head that nobody listens for, or any head when
-- ARGV[5] is 0, is woken as Redisson's unlock does, and attempts.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiting queue (redisson_lock_queue:{name})
-- KEYS[3]  the waiters' deadlines (redisson_lock_timeout:{name})
-- KEYS[4]  the waiters' channel prefix (redisson_lock__channel:{name}); a
--          waiter's channel is <prefix>:<owner>
-- KEYS[5]  the fencing token counter (redisson_lock_token:{name})
-- ARGV[1]  message to publish when the lock is freed ("0")
-- ARGV[2]  owner
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  fair wait timeout in milliseconds
-- ARGV[5]  lease in milliseconds of a hand-over (the releaser's own), 0
--          for no hand-over
-- ARGV[6]  "1" to take a fencing token for the head a hand-over is for
--
-- Returns 1 when the lock was freed, 2 when it was handed over, -1 when
-- this owner did not hold it (also what a command re-sent after a lost
-- reply finds; the Client knows it re-sent and reads that as released).

-- handOver gives the free lock to head, a dlock waiter at the head of the
-- queue (after the one behind it, nil for none), with the lease ARGV[5],
-- and tells it on its channel: "h:<lease>:<token>:<us>" (token 0 when not
-- fenced; us the server's clock, nowMicros, which the waiter checks
-- against its latest attempt that found the lock taken: a message that
-- arrives late, after the hold it gave ended and an attempt found the lock
-- another owner's, is not a grant). The Client sends a lease in ARGV[5] where
-- PUBLISH counts every receiver: one server, or sharded pub/sub on a
-- cluster (on a cluster, classic PUBLISH counts the receivers of the node
-- that ran it, while the message reaches every node). It returns
-- false, having changed nothing but maybe the token counter, when nobody
-- connected to this server listens on the head's channel (listened): the
-- waiter's process died (its connection, and so its subscription, went
-- with it), it is not subscribed yet, or it listens elsewhere. A dead
-- waiter would hold the lock for a lease; it is woken instead, and the
-- waiter behind it takes it out as dead (fair.go), while a live one
-- attempts once subscribed. A Redisson waiter behind it, the new head,
-- gets one wait past the new hold (promote), as when a waiter takes the
-- lock itself; a dlock one keeps its own deadline ahead (it attempts at
-- least every half wait, fair_acquire.lua), which spares the clock read
-- and the ZADD.
-- listened reports whether a client connected to this server subscribes
-- to channel (PUBSUB NUMSUB, or SHARDNUMSUB with SPUBLISH). It is asked
-- before the hand-over message is published, never after: PUBLISH counts
-- only this server's subscribers, but its message also reaches those of
-- the replicas (a waiter's pub/sub connection left on a demoted master
-- after a failover, a cluster client's that reads from replicas) and, on
-- a cluster's classic pub/sub, of every node; a hand-over message
-- published and then found unheard would reach such a waiter as a grant
-- while the lock is freed. NUMSUB also leaves out pattern subscribers,
-- which would count for a dead waiter. pcall: a user without +pubsub
-- (ACL) wakes the head instead.
local function listened(channel)
  local cmd = 'numsub'
  if ARGV[3] == 'spublish' then
    cmd = 'shardnumsub'
  end
  local subs = redis.pcall('pubsub', cmd, channel)
  return type(subs) == 'table' and subs.err == nil and tonumber(subs[2]) > 0
end

local function handOver(head, after)
  local lease = tonumber(ARGV[5])
  local token = 0
  if ARGV[6] == '1' then
    token = nextToken(KEYS[5])
  end
  local channel = KEYS[4] .. ':' .. head
  if not listened(channel) then
    return false
  end
  redis.call(ARGV[3], channel, string.format('h:%d:%d:%d', lease, token, nowMicros()))
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  redis.call('hset', KEYS[1], head, 1)
  redis.call('pexpire', KEYS[1], lease)
  if after and not dlockOwner(after) then
    promote(KEYS[3], after, nowMillis() + lease + tonumber(ARGV[4]))
  end
  return true
end

if redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock expired; its head waiter may still be asleep.
    local now = nowMillis()
    local head, deadline = purge(KEYS[2], KEYS[3], now, nil)
    wakeHead(KEYS[3], KEYS[4], now, tonumber(ARGV[4]), ARGV[1], ARGV[3], head, deadline, 0)
  end
  return -1
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0 -- another owner's field, written by hand: leave it
end
-- A dlock head that listens on its channel is alive whatever its
-- deadline says: it is handed the lock without the purge's read of its
-- deadline (one LRANGE reads it and the new head behind it).
if tonumber(ARGV[5]) > 0 then
  local two = redis.call('lrange', KEYS[2], 0, 1)
  if two[1] and dlockOwner(two[1]) and handOver(two[1], two[2]) then
    return 2
  end
end
local now = nowMillis()
local head, deadline = purge(KEYS[2], KEYS[3], now, nil)
wakeHead(KEYS[3], KEYS[4], now, tonumber(ARGV[4]), ARGV[1], ARGV[3], head, deadline, 0)
return 1
