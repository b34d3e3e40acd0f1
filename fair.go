package dlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
)

// FairMutex is a reentrant distributed lock that grants waiters in the
// order they asked, across Clients: Redisson FairLock's semantics and data
// layout. The lock is a hash like the Mutex's; waiters queue in the list
// redisson_lock_queue:{name}, with deadlines in the zset
// redisson_lock_timeout:{name}, and each waits on its own channel
// redisson_lock__channel:{name}:<owner>, so an unlock wakes only the head of
// the queue. A Go FairMutex and a Java RFairLock on the same name share one
// queue.
//
// Lock joins the queue; TryLock never does, and fails while a live
// waiter is queued (it takes dead dlock waiters out first, see below, and
// can then succeed). A waiter whose ctx ends leaves the queue at once, and
// the waiters behind it move up without their deadlines drifting. A dlock
// waiter whose process died leaves once its Client's holder record is
// gone (at most the watchdog timeout after it died): the next attempt of
// a waiter behind it, or a TryLock, takes it out, and wakes it on its
// channel in case it lives after all (it then joins again at the tail).
// This needs the record to have been written once (the Client is in the
// seen set, see clientinfo.go): a Client under an ACL without
// ~dlock:client:*, or whose records were lost, is treated like a Redisson
// waiter, which writes no record and is skipped once its deadline has
// passed: at most the fair wait timeout (WithFairWaitTimeout, default
// 5 min) after the lock was freed. A live waiter keeps its place however long the holder holds the
// lock, because each attempt pushes its deadline forward; a waiting Lock
// attempts at least every half fair wait timeout. While the lock is held,
// an attempt also keeps the deadlines of the waiters ahead, Java ones
// included, beyond the lock's expiry, so that Redisson's scripts do not
// drop them. A Java waiter that gives up tells nobody: the waiter right
// behind the head checks every second while the lock is held, and a waiter
// of a free lock wakes the head again (unless it was told less than
// 100 ms ago) and checks every 100 ms, so that nobody sleeps on a free
// lock.
//
// What one acquisition costs Redis: a waiter joins the queue with one
// script, and an unlock hands the lock over to it when it is the head: a
// dlock head that listens on its channel holds the lock once it is told,
// with the unlocker's lease (and a new fencing token when the unlocker is
// fenced), and needs no attempt of its own (a head whose handle has
// another lease, or that needs a token the unlocker did not take, makes
// one). A Redisson head, or one that nobody listens for (its process
// died), is woken and takes the lock with an attempt (and the release
// reads no deadline of a dlock head it hands over to). A waiter whose
// process dies just as an unlock runs, before Redis has seen its
// connection close, can be handed the lock: it then holds it for the
// unlocker's lease, as a holder that dies does. The hand-over's rules
// (docs/safety.md): its message carries the server's clock, and a waiter
// takes it only if it ran after the waiter's latest attempt that found the
// lock taken (a late message, whose hold ended before that attempt, is no
// grant) and with at least half its lease left on that count; the release
// asks who listens on the head's channel before it publishes, never
// after; only where the count can be trusted (not a cluster's classic
// pub/sub, not a cluster client that reads from replicas, not
// WithReplicaSync); and a waiter that gives up after it was handed the
// lock gives it back through the release path, sent again until Redis
// answers. A grant moves only
// the new head's deadline (one ZADD), not the whole queue's, and only a
// Redisson new head's (a dlock head keeps its own ahead), a joiner counts
// its deadline from its place, not from the last waiter's, and reads the
// head's deadline only when the head is a Redisson waiter.
// A Lock on a lock that a waiting attempt of the same handle found taken
// less than a second ago subscribes to its channel before it joins, so it
// needs no attempt after subscribing. A waiter named for the dead-waiter
// check is read once a second per Client at most.
//
// Give every handle on one lock, in Go and in Java, the same fair wait
// timeout: a waiter that takes the lock moves the others up by its own
// timeout. Deadlines are read on the Redis server's clock (Redisson's
// scripts use the calling client's clock), so Java clients interoperate as
// long as their clocks are close to the server's.
//
// Reentrancy, leases, the watchdog, lock contexts and fencing are as for
// the Mutex. A FairMutex is safe for concurrent use.
type FairMutex struct {
	handle
}

var _ Locker = (*FairMutex)(nil)

// NewFairMutex returns a handle on the fair lock called name. It talks to
// Redis only when used. Options: WithLease, WithFencing,
// WithFairWaitTimeout, WithoutReentry.
func (c *Client) NewFairMutex(name string, opts ...LockOption) (*FairMutex, error) {
	h, err := c.newHandle(name, opts, func(name string, cfg lockConfig) (kind, error) {
		if err := cfg.accept("FairMutex", optFairWait|optNoReentry); err != nil {
			return nil, err
		}
		wait := cfg.fairWait
		if wait == 0 {
			wait = DefaultFairWaitTimeout
		}
		return newFairKind(c, name, wait), nil
	})
	if err != nil {
		return nil, err
	}
	return &FairMutex{h}, nil
}

// A waiter that gives up leaves the queue. dlock's waiters then wake the
// next one, but Redisson's say nothing (acquireFailed), so dlock waiters
// look for themselves: the waiter right behind the head checks at least
// every fairHeadCheck while the lock is held, and any waiter checks at
// least every fairFreeCheck while the lock is free and another waiter is
// the head (telling that head again each time). This bounds how long a
// dlock waiter can sleep on a free lock when a Java head gave up.
const (
	fairHeadCheck = time.Second
	fairFreeCheck = 100 * time.Millisecond
)

// fairKind holds the Redis names and the wait timeout of one fair lock.
type fairKind struct {
	c             *Client
	name          string
	queue         string // list of waiting owners, head first
	deadlines     string // zset: waiting owner -> deadline in ms
	channelPrefix string // a waiter's channel is channelPrefix:<owner>
	token         string
	wait          int64 // fair wait timeout in ms

	busy atomic.Int64 // when a waiting attempt last found the lock taken (UnixNano)

	aliveMu sync.Mutex
	alive   map[string]time.Time // a waiter's Client id -> when it was last found alive
}

func newFairKind(c *Client, name string, wait time.Duration) *fairKind {
	return &fairKind{
		c:             c,
		name:          name,
		queue:         layout.Prefixed(layout.QueuePrefix, name),
		deadlines:     layout.Prefixed(layout.TimeoutPrefix, name),
		channelPrefix: layout.Prefixed(layout.LockChannelPrefix, name),
		token:         layout.Prefixed(layout.TokenPrefix, name),
		wait:          millis(wait),
	}
}

func (k *fairKind) key() string                 { return k.name }
func (k *fairKind) lockName() string            { return k.name }
func (k *fairKind) field(owner string) string   { return owner }
func (k *fairKind) role() string                { return "" }
func (k *fairKind) renewer() renewer            { return hashRenewer{} }
func (k *fairKind) label() string               { return KindFair }
func (k *fairKind) channel(owner string) string { return k.channelPrefix + ":" + owner }

// attempt tries once to take the lock, and takes dead dlock waiters out
// of its way: when the script names the head waiter standing between the
// caller and the lock (see fair_acquire.lua), and that head is a dlock
// owner whose Client's holder record is gone although it was written
// (Client.goneOwner: its process died), it leaves the queue for the dead
// one (fair_leave.lua, which also wakes it, should it be alive) and the
// attempt runs again at once. Redis Cluster keeps the record in another
// slot than the lock, so the record is read here, not in the script. A
// Redisson (Java) waiter writes no record and keeps Redisson's rule: it
// is skipped once its deadline has passed.
//
// A waiting attempt first waits for this Client's own record's first
// write (once per Client), so that a waiter of this Client that dies
// while queued can be told dead. With WithReplicaSync, each run starts
// r.check afresh, so that it holds the outcome of the last run: the one
// that took the lock, if any (a queue join that missed its WAIT does not
// make the engine give back a lock whose own write was acknowledged).
func (k *fairKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	if r.wait {
		k.c.record.await(ctx, k.c.done)
	}
	for range fairPruneRounds {
		res, head, err := k.try(ctx, r)
		if err != nil || res.acquired || head == "" || k.aliveLately(head) || !k.gone(ctx, head) {
			return res, err
		}
		if err := k.prune(ctx, head); err != nil {
			return res, nil // the next attempt looks again
		}
		k.c.cfg.logger.Debug("dlock: a dead waiter left the fair queue: its holder record is gone",
			"lock", k.name, "waiter", head)
	}
	res, _, err := k.try(ctx, r)
	return res, err
}

// gone reports whether the waiter owner is a dead dlock waiter
// (Client.goneOwner), and remembers for fairAliveFor that its Client
// lives when it is not.
func (k *fairKind) gone(ctx context.Context, owner string) bool {
	if k.c.goneOwner(ctx, owner) {
		return true
	}
	id, ok := layout.OwnerClientID(owner)
	if !ok {
		return false // not a dlock owner: nothing was read
	}
	k.aliveMu.Lock()
	defer k.aliveMu.Unlock()
	now := time.Now()
	if len(k.alive) >= fairAliveKept {
		for o, t := range k.alive {
			if now.Sub(t) >= fairAliveFor {
				delete(k.alive, o)
			}
		}
	}
	if len(k.alive) < fairAliveKept {
		if k.alive == nil {
			k.alive = map[string]time.Time{}
		}
		k.alive[id] = now
	}
	return false
}

// aliveLately reports whether the Client of the waiter owner was found
// alive less than fairAliveFor ago: its holder record is not read again
// meanwhile. (Owners are made per Lock; their Client's record is what
// says whether they live.)
func (k *fairKind) aliveLately(owner string) bool {
	id, ok := layout.OwnerClientID(owner)
	if !ok {
		return false
	}
	k.aliveMu.Lock()
	defer k.aliveMu.Unlock()
	t, ok := k.alive[id]
	return ok && time.Since(t) < fairAliveFor
}

// A waiter named for a check (see attempt) that was found alive is not
// checked again for fairAliveFor: under contention the waiter behind the
// head names it at every attempt, and each check is a round trip. A dead
// waiter's record goes at most the watchdog timeout after it died, so
// this adds at most fairAliveFor to that. At most fairAliveKept Clients'
// verdicts are kept per handle.
const (
	fairAliveFor  = time.Second
	fairAliveKept = 64
)

// fairPruneRounds bounds the dead waiters one attempt takes out of the
// queue; the next attempt takes out more.
const fairPruneRounds = 4

// try runs the acquire script once. head is the waiter the script names
// for a check, "" for none.
func (k *fairKind) try(ctx context.Context, r request) (res attemptResult, head string, err error) {
	r.check.Reset()
	cmd, _ := k.c.drv.Run(ctx, r.check, scripts.FairAcquire, []string{k.name, k.queue, k.deadlines, k.token, k.channelPrefix},
		millis(r.lease), r.owner, k.wait, boolArg(r.wait), fairFenceArg(r), unlockMessage, k.c.publish,
		millis(fairHeadCheck), millis(fairFreeCheck))
	reply, err := cmd.Slice()
	if err != nil {
		return attemptResult{}, "", err
	}
	nums := make([]int64, 0, 3)
	for i, v := range reply {
		switch v := v.(type) {
		case int64:
			nums = append(nums, v)
		case string:
			if i == 3 {
				head = v
			}
		}
	}
	var seq int64
	if len(nums) == 3 { // {0, ms, us}: taken, as of the server's clock us
		seq, nums = nums[2], nums[:2]
	}
	res, err = parseAttempt(nums)
	res.seq = seq
	if err == nil && r.wait && !res.acquired {
		k.busy.Store(time.Now().UnixNano())
	}
	return res, head, err
}

// fairFenceArg is the fencing argument of a fair attempt (fenceArg): a
// fenced first acquisition ("-4") takes a new token even when it finds
// its owner holding the lock. A release may have handed the lock over to
// it without a token (an unfenced unlocker's), and the counter's last
// token is then an earlier holder's; for a command re-sent after a lost
// reply, a new token is as good as the one its first run took, which
// nobody got.
func fairFenceArg(r request) string {
	if r.fence && !r.reentry {
		return "-4"
	}
	return fenceArg(r)
}

// subscribeEarly says that a Lock should subscribe before its first
// attempt when a waiting attempt on this handle found the lock taken less
// than fairBusyFor ago: its attempt will most likely join the queue, and
// subscribed first, it needs no attempt after subscribing (see
// waiter.subscribeEarly). A wrong guess costs a subscription.
func (k *fairKind) subscribeEarly() bool {
	return time.Since(time.Unix(0, k.busy.Load())) < fairBusyFor
}

// fairBusyFor is how long after a waiting attempt found a fair lock taken
// its next Locks subscribe before their first attempt.
const fairBusyFor = time.Second

// release gives back r.owner's hold. When the head waiter is a dlock
// waiter, of any Client, subscribed to its channel, the release hands the
// lock over to it with r's lease (and a fencing token when r is fenced),
// and tells it so (fair_release.lua, handedOver): the head needs no
// attempt of its own. Only where the script can count who received the
// message (handsOverByMessage); elsewhere the head is woken and attempts.
func (k *fairKind) release(ctx context.Context, r request) (releaseResult, error) {
	handLease := int64(0) // no hand-over
	if k.handsOverByMessage() {
		handLease = millis(r.lease)
	}
	return releaseReply(k.c.drv.Run(ctx, nil, scripts.FairRelease,
		[]string{k.name, k.queue, k.deadlines, k.channelPrefix, k.token},
		unlockMessage, r.owner, k.c.publish, k.wait, handLease, boolArg(r.fence)))
}

// handsOverByMessage says whether a release may hand the lock over by
// message. The script hands over only when PUBLISH says the message
// reached someone, and frees the lock otherwise; that count must include
// the head's subscription, or the head takes a message as its grant while
// the lock is free for anyone. One server counts every subscriber, and so
// does SPUBLISH on a cluster (a shard's subscribers connect to its
// master); a cluster's classic PUBLISH counts only the node that ran it,
// while the message reaches every node. Not with WithReplicaSync either
// (the head's hold would skip the replica sync), nor on a cluster client
// that reads from replicas (ReadOnly, RouteByLatency, RouteRandomly): its
// sharded subscriptions may be on replicas, which SPUBLISH does not
// count. (The script asks NUMSUB before it publishes, which keeps a
// message from reaching a waiter it did not count anyway; see
// fair_release.lua.)
func (k *fairKind) handsOverByMessage() bool {
	return !k.c.cfg.replicas.enabled() && (!k.c.cluster || k.c.publish == "spublish") && !k.c.readsReplicas
}

// trustsMessages says whether a waiter of this Client may take a
// hand-over message as its grant: only where its own releases hand over
// (handsOverByMessage). A waiter with WithReplicaSync must not take a
// hold whose write no replica acknowledged; one whose subscriptions may be
// on replicas (a cluster client that reads from them) could hear a message
// that the release did not count.
func (k *fairKind) trustsMessages() bool { return k.handsOverByMessage() }

// handedOver reads the messages of a waiter's channel (msgs, oldest
// first) for a hand-over (fair_release.lua) that ran after the waiter's
// latest attempt that found the lock taken, which ran at after on the
// server's clock: found says that such a release gave the lock to the
// waiter, with the lease lease and the fencing token token (0 when the
// release took none). An older hand-over is no grant: the attempt after
// it found the lock another owner's, so the hold it gave has ended.
func (k *fairKind) handedOver(msgs []string, after int64) (lease time.Duration, token int64, found bool) {
	for _, m := range msgs {
		ho, ok := parseHandOver(m)
		if ok && (ho.seq > after || !handOverSeqChecked) {
			lease, token, found = ho.lease, ho.token, true
		}
	}
	return lease, token, found
}

// handOverMessage is what a hand-over message says (fair_release.lua):
// "h:<lease ms>:<token>:<server clock us>".
type handOverMessage struct {
	lease time.Duration
	token int64
	seq   int64
}

// parseHandOver reads a hand-over message; ok is false for any other
// message (the plain wake-up "0").
func parseHandOver(m string) (ho handOverMessage, ok bool) {
	rest, ok := strings.CutPrefix(m, "h:")
	if !ok {
		return ho, false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return ho, false
	}
	var n [3]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return ho, false
		}
		n[i] = v
	}
	return handOverMessage{lease: time.Duration(n[0]) * time.Millisecond, token: n[1], seq: n[2]}, true
}

// leave takes a waiter that gave up out of the queue. A release may have
// handed the lock over to it meanwhile: the script then finds it holding
// the lock, not queued, and leave reports holding, unless this Client
// holds the lock for the owner (a re-entry's). The caller gives the lock
// back (handle.leave).
func (k *fairKind) leave(ctx context.Context, r request) (holding bool, err error) {
	keys := []string{k.name, k.queue, k.deadlines, k.channelPrefix}
	n, err := k.c.eval(ctx, scripts.FairLeave, keys, r.owner, k.wait, unlockMessage, k.c.publish).Int64()
	if err != nil || n != fairLeftHolding || r.reentry {
		return false, err
	}
	return k.c.holds.held(holdKey{k.key(), k.field(r.owner)}) == nil, nil
}

// holdsUp is how long a waiter that stopped waiting without leaving the
// queue holds the waiters behind it up, at most: its deadline passes one
// fair wait timeout after the lock is free with it at the head, and the
// waiter behind it skips it then. (Its Client lives, so the dead-waiter
// check does not take it out sooner.)
func (k *fairKind) holdsUp() time.Duration { return time.Duration(k.wait) * time.Millisecond }

// fairLeftHolding is fair_leave.lua's answer for an owner that was not
// queued but holds the lock.
const fairLeftHolding = 2

// prune takes a waiter found dead out of the queue, and wakes it on its
// channel: should it be alive after all (its record lost to an eviction,
// say), it attempts again at once and joins at the tail, instead of
// sleeping out its timer on a lock it is no longer queued for.
func (k *fairKind) prune(ctx context.Context, owner string) error {
	keys := []string{k.name, k.queue, k.deadlines, k.channelPrefix}
	return k.c.eval(ctx, scripts.FairLeave, keys, owner, k.wait, unlockMessage, k.c.publish, "1").Err()
}

func (k *fairKind) forceRelease(ctx context.Context) (bool, error) {
	keys := []string{k.name, k.queue, k.deadlines, k.channelPrefix, layout.UnlockLatch(k.name, k.c.newRequest())}
	return k.c.forceScript(ctx, scripts.FairForceRelease, keys, unlockMessage, k.c.publish, k.wait)
}
