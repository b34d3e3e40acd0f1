package dlock

// The two ways the first fair hand-over (reverted in f74858f) could grant
// the lock twice: a hand-over message read after a later attempt had found
// the lock another owner's, and a hand-over on a cluster whose classic
// PUBLISH counts only the receivers of one node.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// TestFairStaleHandOverIsNoGrant: a hand-over message that ran before the
// waiter's latest attempt found the lock taken is no grant. Its hold has
// ended (that attempt found another owner), so a waiter that took it would
// hold the lock beside the real holder. The message stands for one whose
// delivery was held up (a paused process, a slow pub/sub connection) until
// after the hold it gave had run out and another owner took the lock: the
// test publishes it itself, with the server's clock of before the waiter's
// attempt, while another owner holds the lock. The waiter must wake, look
// again (one more attempt) and go on waiting; the holder's unlock then
// hands the lock over for real.
func TestFairStaleHandOverIsNoGrant(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	before := serverMicros(t, ctx)

	rdb := newRedis(t)
	attempts := &scriptRuns{s: scripts.FairAcquire}
	rdb.AddHook(attempts)
	wc := newClient(t, rdb)
	w := mustFair(t, wc, name)
	owner, got := fairWaiter(t, ctx, w, 1)
	waitForSubscriber(t, wc, w.kind.channel(owner))
	queued := attempts.n.Load()

	stale := fmt.Sprintf("h:%d:0:%d", millis(w.lease()), before)
	if err := wc.rdb.Publish(ctx, w.kind.channel(owner), stale).Err(); err != nil {
		t.Fatal(err)
	}
	// The waiter reads the message when it wakes, and attempts again
	// when it does not take it as a grant.
	eventually(t, 10*time.Second, func() error {
		select {
		case r := <-got:
			t.Fatalf("the waiter took a stale hand-over as its grant (Lock returned, err %v) while another owner holds the lock", r.err)
		default:
		}
		if attempts.n.Load() == queued {
			return fmt.Errorf("the waiter has not looked again after the message")
		}
		return nil
	})
	if ok, _ := wc.rdb.HExists(ctx, name, owner).Result(); ok {
		t.Fatalf("the waiter %s holds the lock in Redis after a stale message", owner)
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, 10*time.Second, "the waiter after the real hand-over")
	if ok, err := wc.rdb.HExists(ctx, name, owner).Result(); err != nil || !ok {
		t.Errorf("the waiter's lock is not its own in Redis (%v, %v)", ok, err)
	}
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// serverMicros is the Redis server's clock in microseconds, as the fair
// scripts read it (nowMicros in fair_queue.lua).
func serverMicros(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	now, err := newRedis(t).Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// TestFairClusterClassicNoHandOver: on a cluster with classic pub/sub a
// release does not hand the lock over; the head waiter is woken and takes
// the lock with an attempt of its own. Classic PUBLISH counts only the
// subscribers of the node that ran it, while the message reaches every
// node: the head, subscribed on another node, would be counted out (the
// lock freed, the head woken) and still receive the hand-over message.
// The head's Client here subscribes through another master (its pub/sub
// connection was opened for a lock in a slot of that master), so the
// waiter returned from Lock must hold the lock in Redis.
func TestFairClusterClassicNoHandOver(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := boundedCtx(t, time.Minute)
	name := topoName(t, tp)
	other := name + ":other"
	for i := 0; cl.MasterFor(other) == cl.MasterFor(name); i++ {
		other = name + ":other" + strconv.Itoa(i)
	}

	wc := newClient(t, tp.redis(t), WithShardedPubSub(false))
	// Open the waiter's pub/sub connection on other's master: a waiter
	// on other, held by another Client, stays subscribed throughout.
	blocker := mustMutex(t, newClient(t, tp.redis(t), WithShardedPubSub(false)), other)
	blocked := mustLock(t, ctx, blocker)
	octx, cancelOther := context.WithCancel(ctx)
	otherWait := lockAsync(octx, mustMutex(t, wc, other))
	defer func() {
		cancelOther()
		<-otherWait
		_ = blocker.Unlock(blocked)
	}()
	clusterSubscriber(t, cl, wc, prefixName(channelPrefix, other))

	hc := newClient(t, tp.redis(t), WithShardedPubSub(false))
	holder := mustFair(t, hc, name)
	held := mustLock(t, ctx, holder)
	w := mustFair(t, wc, name)
	owner, got := fairWaiter(t, ctx, w, 1)
	clusterSubscriber(t, cl, wc, w.kind.channel(owner))
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, 10*time.Second, "the head waiter")
	if ok, err := wc.rdb.HExists(ctx, name, owner).Result(); err != nil || !ok {
		t.Errorf("the head waiter returned from Lock, but the lock is not its own in Redis (%v, %v)", ok, err)
	}

	// A waiter whose pub/sub connection is on the lock's own master (its
	// first subscription is the lock's channel) would be counted, and the
	// script's NUMSUB keeps the above safe anyway; still, the rule is the
	// plain wake-up on classic pub/sub: the head attempts after the unlock.
	rdb := tp.redis(t)
	attempts := &scriptRuns{s: scripts.FairAcquire}
	rdb.AddHook(attempts)
	nc := newClient(t, rdb, WithShardedPubSub(false))
	next := mustFair(t, nc, name)
	nextOwner, nextGot := fairWaiter(t, ctx, next, 1)
	clusterSubscriber(t, cl, nc, next.kind.channel(nextOwner))
	queued := attempts.n.Load()
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
	nl := await(t, nextGot, 10*time.Second, "the next head waiter")
	if n := attempts.n.Load() - queued; n == 0 {
		t.Errorf("the head took the lock without an attempt: a release handed it over on classic pub/sub")
	}
	if err := next.Unlock(nl); err != nil {
		t.Fatal(err)
	}
}

// clusterSubscriber waits until c's hub has a waiter on channel and some
// node of cl counts a classic subscriber of it.
func clusterSubscriber(t *testing.T, cl *redistest.Cluster, c *Client, channel string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if c.hub.Waiters(channel) == 0 {
			return errors.New("no waiter yet")
		}
		for _, n := range cl.Nodes() {
			v, err := n.Do(context.Background(), "PUBSUB", "NUMSUB", channel)
			if err != nil {
				return err
			}
			if r, _ := v.([]any); len(r) == 2 && r[1] != int64(0) {
				return nil
			}
		}
		return fmt.Errorf("no node counts a subscriber of %s", channel)
	})
}

// TestFairLeaveAfterHandOverOutlivesOutage: a waiter that gives up after a
// release handed it the lock, while Redis cannot be reached, leaves the
// queue and gives the lock back once Redis can be reached again: the leave
// is sent again as a release is (and the give-back after it, sendBack),
// rather than the lock staying the waiter's for its 30 s lease while the
// next waiter waits.
func TestFairLeaveAfterHandOverOutlivesOutage(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	admin := newRedis(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)

	proxy := redistest.NewTestProxy(t, redisAddr)
	var g dialGate
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: g.dial, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	wc := newClient(t, rdb)
	fm := mustFair(t, wc, name)
	k := fm.kind.(*fairKind)
	gone := queuedListener(t, ctx, wc, k)
	next := mustFair(t, newClient(t, nil), name)
	_, got := fairWaiter(t, ctx, next, 2)
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if ok, err := admin.HExists(ctx, name, gone.owner).Result(); err != nil || !ok {
		t.Fatalf("the head waiter %s was not handed the lock (%v, %v)", gone.owner, ok, err)
	}

	g.shut.Store(true)
	proxy.CloseAll()
	fm.leave(gone) // as its Lock does when its ctx ends; the first tries fail
	if ok, err := admin.HExists(ctx, name, gone.owner).Result(); err != nil || !ok {
		t.Fatalf("the lock left the waiter during the outage (%v, %v)", ok, err)
	}
	g.shut.Store(false)
	l := await(t, got, 10*time.Second, "the next waiter once Redis could be reached again")
	if err := next.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairLeaveOutlivesOutageLongerThanLease: a Lock that gives up while
// Redis cannot be reached, for longer than its lease, still leaves the
// queue once Redis is back. Its place would otherwise hold the next
// waiter up for a fair wait timeout (5 min here) after the lock is free:
// its Client lives, so no waiter takes it out for dead (verify/ saw a fair
// lock stall so after a partition).
func TestFairLeaveOutlivesOutageLongerThanLease(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)

	proxy := redistest.NewTestProxy(t, redisAddr)
	var g dialGate
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: g.dial, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	const lease = 300 * time.Millisecond
	w := mustFair(t, newClient(t, rdb), name, WithLease(lease))
	wctx, giveUp := context.WithCancel(ctx)
	_, gaveUp := fairWaiter(t, wctx, w, 1)
	next := mustFair(t, newClient(t, nil), name)
	_, got := fairWaiter(t, ctx, next, 2)

	g.shut.Store(true)
	proxy.CloseAll()
	giveUp()
	if r := <-gaveUp; r.err == nil {
		t.Fatal("the Lock given up returned the lock")
	}
	time.Sleep(3 * lease) // the outage's length, not a wait for a condition
	g.shut.Store(false)
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, 10*time.Second, "the next waiter once the one ahead had left")
	if err := next.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairLateHandOverKeepsFullLease: a hand-over's lease is counted from
// when the waiter's latest attempt that found the lock taken was sent,
// which can be most of a lease before the unlock (the head sleeps until
// the holder's lease would end). Taken as a grant then, the hold would end
// locally long before Redis's lease, before the watchdog's first renewal
// (reviewers saw the lock lost 0.1–0.8 s after Lock returned). A waiter
// does not take a hand-over whose lease may be half gone on that count:
// its next attempt finds it holding and sets the lease afresh.
func TestFairLateHandOverKeepsFullLease(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const lease = 2 * time.Second
	holder := mustFair(t, newClient(t, nil), name, WithLease(lease))
	held := mustLock(t, ctx, holder)
	wc := newClient(t, nil)
	w := mustFair(t, wc, name, WithLease(lease))
	owner, got := fairWaiter(t, ctx, w, 1)
	waitForSubscriber(t, wc, w.kind.channel(owner))
	// The waiter attempted once, at most a moment after the holder took
	// the lock, and sleeps until its lease would end: unlock late in it.
	eventually(t, 10*time.Second, func() error {
		if pttl := wc.rdb.PTTL(ctx, name).Val(); pttl > lease/3 {
			return fmt.Errorf("the holder's lease has %v left", pttl)
		}
		return nil
	})
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, 10*time.Second, "the head waiter")
	hd := wc.holds.held(w.holdKey(owner))
	if hd == nil {
		t.Fatal("no hold registered for the waiter")
	}
	if left := time.Until(wc.holds.deadline(hd)); left < validity(lease)*6/10 {
		t.Errorf("the handed hold ends locally in %v, want most of its %v lease", left, lease)
	}
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairHandOverNotPublishedUnheard: a release hands the lock over only
// to a head that a client connected to the master listens for, and asks
// before it publishes: a hand-over message published and then found
// unheard on the master (the reverted first version's order) still reaches
// the replicas, where a waiter's pub/sub connection can be (left on a
// demoted master after a failover), and would be a grant there while the
// lock is freed. Here the head's channel is heard on the replica only: the
// release must free the lock and publish the plain wake-up, never "h:".
func TestFairHandOverNotPublishedUnheard(t *testing.T) {
	s := sharedSentinel(t)
	tp := sentinelTopology(t)
	ctx := boundedCtx(t, time.Minute)
	name := topoName(t, tp)
	holder := mustFair(t, newClient(t, tp.redis(t)), name)
	held := mustLock(t, ctx, holder)
	wc := newClient(t, tp.redis(t))
	k := mustFair(t, wc, name).kind.(*fairKind)
	head := request{owner: wc.newOwner(), lease: 30 * time.Second, wait: true}
	if res, err := k.attempt(ctx, head); err != nil || res.acquired {
		t.Fatalf("queueing %s: %+v, %v", head.owner, res, err)
	}
	defer func() { _, _ = k.leave(context.Background(), head) }()
	sub := s.Replica().Client().Subscribe(ctx, k.channel(head.owner))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Payload != unlockMessage {
		t.Errorf("the replica's subscriber got %q, want the plain wake-up %q: a hand-over message nobody on the master heard", msg.Payload, unlockMessage)
	}
	if ok, _ := wc.rdb.HExists(ctx, name, head.owner).Result(); ok {
		t.Errorf("the lock was handed over to %s, whom nobody on the master listens for", head.owner)
	}
}

// queuedListener queues a new owner of wc as a waiter on k's lock, and
// subscribes to its channel as its Lock's sleep would, without a Lock:
// a waiter whose Lock the test ends (handle.leave) when it chooses.
func queuedListener(t *testing.T, ctx context.Context, wc *Client, k *fairKind) request {
	t.Helper()
	r := request{owner: wc.newOwner(), lease: 30 * time.Second, wait: true}
	if res, err := k.attempt(ctx, r); err != nil || res.acquired {
		t.Fatalf("queueing %s: %+v, %v", r.owner, res, err)
	}
	sub, err := wc.hub.Subscribe(ctx, k.channel(r.owner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close(false) })
	recv(t, sub.Ready(), 5*time.Second, "the subscription")
	return r
}
