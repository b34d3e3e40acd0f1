package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// mustFair makes a FairMutex or fails the test.
func mustFair(t testing.TB, c *Client, name string, opts ...LockOption) *FairMutex {
	t.Helper()
	m, err := c.NewFairMutex(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fairQueue returns the owners queued for the fair lock name, head first.
func fairQueue(t testing.TB, rdb redis.UniversalClient, name string) []string {
	t.Helper()
	q, err := rdb.LRange(context.Background(), prefixName(fairQueuePrefix, name), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// fairDeadline returns owner's deadline in the fair lock's zset.
func fairDeadline(t testing.TB, rdb redis.UniversalClient, name, owner string) (ms int64, ok bool) {
	t.Helper()
	d, err := rdb.ZScore(context.Background(), prefixName(fairDeadlinePrefix, name), owner).Result()
	if isNil(err) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return int64(d), true
}

// waitForQueue waits until n owners are queued for the fair lock name and
// returns them.
func waitForQueue(t testing.TB, rdb redis.UniversalClient, name string, n int) []string {
	t.Helper()
	var q []string
	eventually(t, 5*time.Second, func() error {
		if q = fairQueue(t, rdb, name); len(q) != n {
			return fmt.Errorf("queue %v, want %d waiters", q, n)
		}
		return nil
	})
	return q
}

// noChannelsLeft registers a check, run when the test ends, that nobody is
// subscribed to any channel of the lock name (the fair lock's per-waiter
// channels, the read-write lock's channel). Call it after lockName and
// before making Clients, so that it runs after they are closed.
func noChannelsLeft(t testing.TB, name string) {
	t.Helper()
	rdb := newRedis(t)
	t.Cleanup(func() {
		eventually(t, 5*time.Second, func() error {
			chs, err := rdb.PubSubChannels(context.Background(), "*"+name+"*").Result()
			if err != nil {
				return err
			}
			if len(chs) != 0 {
				return fmt.Errorf("channels still subscribed: %v", chs)
			}
			return nil
		})
	})
}

// fairNotices subscribes to every waiter channel of the fair lock name
// and returns a function that reports, in order, the owners told since its
// last call. Every message must be an unlock message or a hand-over.
func fairNotices(t *testing.T, name string) func() []string {
	t.Helper()
	messages := fairMessages(t, name)
	return func() []string {
		t.Helper()
		var woken []string
		for _, m := range messages() {
			if m.payload != unlockMessage && !strings.HasPrefix(m.payload, "h:") {
				t.Errorf("message %q to %s", m.payload, m.owner)
			}
			woken = append(woken, m.owner)
		}
		return woken
	}
}

// fairMessage is a message on a fair lock waiter's channel.
type fairMessage struct{ owner, payload string }

// fairMessages subscribes to every waiter channel of the fair lock name
// and returns a function that reports, in order, the messages published
// since its last call.
func fairMessages(t *testing.T, name string) func() []fairMessage {
	t.Helper()
	ctx := context.Background()
	prefix := prefixName(channelPrefix, name) + ":"
	rdb := newRedis(t)
	watch := rdb.PSubscribe(ctx, prefix+"*")
	t.Cleanup(func() { _ = watch.Close() })
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := watch.Receive(sctx); err != nil { // the PSUBSCRIBE's confirmation
		t.Fatal(err)
	}
	return func() []fairMessage {
		t.Helper()
		// Messages arrive in order: once a marker published now is back,
		// every earlier message is in.
		marker := prefix + "marker"
		if err := rdb.Publish(ctx, marker, "x").Err(); err != nil {
			t.Fatal(err)
		}
		var got []fairMessage
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			msg, err := watch.ReceiveMessage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Channel == marker {
				return got
			}
			got = append(got, fairMessage{strings.TrimPrefix(msg.Channel, prefix), msg.Payload})
		}
	}
}

// fairWaiter starts a Lock on m in a goroutine and waits until it is the
// n-th owner in the queue. It returns the owner and a channel that gets the
// Lock's result (await).
func fairWaiter(t *testing.T, ctx context.Context, m *FairMutex, n int) (string, <-chan lockResult) {
	t.Helper()
	got := lockAsync(ctx, m)
	q := waitForQueue(t, m.c.rdb, m.Name(), n)
	return q[n-1], got
}

// TestFairGrantOrder: waiters from two Clients are granted the lock in the
// order they queued, and each unlock publishes exactly one message, on the
// next waiter's own channel.
func TestFairGrantOrder(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	notices := fairNotices(t, name)
	cs := []*Client{newClient(t, nil), newClient(t, nil)}
	holder := mustFair(t, cs[0], name)
	held := mustLock(t, ctx, holder)

	const n = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	owners := make([]string, n)
	for i := range n {
		m := mustFair(t, cs[i%2], name)
		owner, lc := fairWaiter(t, ctx, m, i+1)
		owners[i] = owner
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r lockResult
			select {
			case r = <-lc:
			case <-time.After(10 * time.Second):
				r.err = errors.New("not granted within 10s")
			}
			if r.err != nil {
				t.Errorf("waiter %d: %v", i, r.err)
				return
			}
			l := r.lctx
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := m.Unlock(l); err != nil {
				t.Error(err)
			}
		}()
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	awaitGroup(t, &wg, time.Minute, "the waiters")
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Errorf("grant order %v, want %v", order, want)
	}

	// n unlocks freed the lock; all but the last had a waiter to wake,
	// in order. A waiter that tries while the lock is free and the head
	// has not taken it yet tells the head again (it may be a Redisson
	// thread that missed its message), so a head may hear twice in a row.
	if woken := notices(); !slices.Equal(slices.Compact(woken), owners) {
		t.Errorf("unlocks woke %v, want each waiter, in order: %v", woken, owners)
	}
	if q := fairQueue(t, cs[0].rdb, name); len(q) != 0 {
		t.Errorf("queue left: %v", q)
	}
}

// TestFairMutualExclusion: 4 goroutines on each of 2 Clients increment a
// counter with a non-atomic GET then SET under the fair lock.
func TestFairMutualExclusion(t *testing.T) {
	name := lockName(t)
	noChannelsLeft(t, name)
	checkMutualExclusion(t, name, 2, 4, 400, func(c *Client) Locker { return mustFair(t, c, name) })
	if q := fairQueue(t, newRedis(t), name); len(q) != 0 {
		t.Errorf("queue left: %v", q)
	}
}

// TestFairTryLockDoesNotQueue: TryLock never joins the queue, and does not
// jump it either: a free lock with a waiter ahead is not for TryLock.
func TestFairTryLockDoesNotQueue(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c := newClient(t, nil)
	m := mustFair(t, c, name)
	held := mustLock(t, ctx, m)
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotObtained", err)
	}
	if q := fairQueue(t, c.rdb, name); len(q) != 0 {
		t.Fatalf("TryLock queued: %v", q)
	}
	// A waiter that never comes back (a dead process) is queued, then the
	// lock is freed: it is that waiter's turn, not TryLock's.
	k := m.kind.(*fairKind)
	dead := request{owner: "dead:1", lease: time.Second, wait: true}
	if res, err := k.attempt(ctx, dead); err != nil || res.acquired {
		t.Fatalf("dead waiter's attempt: %+v, %v", res, err)
	}
	if err := m.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with a waiter ahead: %v, want ErrNotObtained", err)
	}
	if _, err := k.leave(ctx, dead); err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock of a free lock with an empty queue: %v", err)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairDeadWaiterSkipped: a waiter that stops coming back is skipped
// once its deadline, the fair wait timeout after the unlock, has passed;
// not before.
func TestFairDeadWaiterSkipped(t *testing.T) {
	ctx := context.Background()
	const wait = 500 * time.Millisecond
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	holder := mustFair(t, c, name, WithFairWaitTimeout(wait))
	held := mustLock(t, ctx, holder)
	k := holder.kind.(*fairKind)
	// A Redisson owner (version-4 UUID): it has no holder record by
	// design, so it is skipped at its deadline, not before.
	javaID, err := newUUID()
	if err != nil {
		t.Fatal(err)
	}
	dead := javaID + ":1"
	if _, err := k.attempt(ctx, request{owner: dead, lease: time.Second, wait: true}); err != nil {
		t.Fatal(err)
	}
	live := mustFair(t, newClient(t, nil), name, WithFairWaitTimeout(wait))
	_, got := fairWaiter(t, ctx, live, 2)

	unlocked := time.Now()
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		l := r.lctx
		if r.err != nil {
			t.Fatal(r.err)
		}
		d := time.Since(unlocked)
		t.Logf("live waiter acquired %v after the unlock (fair wait timeout %v)", d, wait)
		if d < wait*4/5 {
			t.Errorf("the live waiter jumped the dead one after %v, before its deadline", d)
		}
		if l != nil {
			if err := live.Unlock(l); err != nil {
				t.Error(err)
			}
		}
	case <-time.After(wait + 5*time.Second):
		t.Fatal("the dead waiter blocked the queue past its deadline")
	}
	if q := fairQueue(t, c.rdb, name); len(q) != 0 {
		t.Errorf("queue left: %v", q)
	}
	if _, ok := fairDeadline(t, c.rdb, name, dead); ok {
		t.Error("the dead waiter's deadline is still there")
	}
}

// TestFairLiveWaitersKeepPlace: waiters that wait many fair wait timeouts,
// because the holder holds that long, are not dropped as dead (Redisson
// #3004): the unlock still wakes the first of them, and they keep their
// order. The holder's short watchdog timeout keeps the lock's TTL, from
// which the waiters' deadlines start, short.
func TestFairLiveWaitersKeepPlace(t *testing.T) {
	ctx := context.Background()
	const wait = 200 * time.Millisecond
	name := lockName(t)
	noChannelsLeft(t, name)
	notices := fairNotices(t, name)
	c := newClient(t, nil, WithWatchdogTimeout(300*time.Millisecond))
	holder := mustFair(t, c, name, WithFairWaitTimeout(wait))
	held := mustLock(t, ctx, holder)
	w1 := mustFair(t, newClient(t, nil), name, WithFairWaitTimeout(wait))
	w2 := mustFair(t, newClient(t, nil), name, WithFairWaitTimeout(wait))
	o1, got1 := fairWaiter(t, ctx, w1, 1)
	o2, got2 := fairWaiter(t, ctx, w2, 2)

	// Hold for many fair wait timeouts, checking the queue throughout.
	for end := time.Now().Add(8 * wait); time.Now().Before(end); time.Sleep(wait / 4) {
		if q := fairQueue(t, c.rdb, name); !slices.Equal(q, []string{o1, o2}) {
			t.Fatalf("queue %v during a long hold, want [%s %s]", q, o1, o2)
		}
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l1 := await(t, got1, 10*time.Second, "first waiter")
	// On a loaded machine the first waiter can be slow enough to take the
	// lock that it is told again; what matters is that only it is told.
	if woken := notices(); len(woken) == 0 || slices.ContainsFunc(woken, func(o string) bool { return o != o1 }) {
		t.Errorf("the unlock woke %v, want the first waiter %s", woken, o1)
	}
	select {
	case <-got2:
		t.Fatal("the second waiter got the lock while the first held it")
	default:
	}
	if err := w1.Unlock(l1); err != nil {
		t.Fatal(err)
	}
	if err := w2.Unlock(await(t, got2, 10*time.Second, "second waiter")); err != nil {
		t.Fatal(err)
	}
	if woken := notices(); !slices.Equal(woken, []string{o2}) {
		t.Errorf("the second unlock woke %v, want %s", woken, o2)
	}
}

// TestFairCancelledWaiterLeaves: a waiter whose ctx ends leaves the queue
// before Lock returns, and the waiters behind it move up by exactly one
// wait (no drift).
func TestFairCancelledWaiterLeaves(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	holder := mustFair(t, c, name)
	held := mustLock(t, ctx, holder)
	wc := newClient(t, nil)
	m := mustFair(t, wc, name)
	o1, got1 := fairWaiter(t, ctx, m, 1)

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Lock(cctx)
		errc <- err
	}()
	q := waitForQueue(t, c.rdb, name, 2)
	o2 := q[1]
	o3, got3 := fairWaiter(t, ctx, m, 3)
	before, _ := fairDeadline(t, c.rdb, name, o3)

	cancel()
	if err := recv(t, errc, 5*time.Second, "cancelled Lock"); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	if q := fairQueue(t, c.rdb, name); !slices.Equal(q, []string{o1, o3}) {
		t.Errorf("queue after the cancel %v, want [%s %s]", q, o1, o3)
	}
	if _, ok := fairDeadline(t, c.rdb, name, o2); ok {
		t.Error("the cancelled waiter's deadline is still there")
	}
	after, _ := fairDeadline(t, c.rdb, name, o3)
	if want := before - DefaultFairWaitTimeout.Milliseconds(); after != want {
		t.Errorf("deadline behind the cancelled waiter %d -> %d, want %d", before, after, want)
	}

	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	for _, got := range []<-chan lockResult{got1, got3} {
		if err := m.Unlock(await(t, got, 10*time.Second, "waiter")); err != nil {
			t.Error(err)
		}
	}
}

// sleepReports returns an Option that reports each sleep of a waiting
// Lock of a Client (the Observer's Wait hook) on the channel it also
// returns (buffered; a report that finds the buffer full is dropped).
func sleepReports() (Option, <-chan WaitInfo) {
	ch := make(chan WaitInfo, 16)
	return WithObserver(Observer{Wait: func(_ context.Context, _ LockInfo, w WaitInfo) {
		select {
		case ch <- w:
		default:
		}
	}}), ch
}

// awaitLongSleep waits for a Lock's sleep after its subscription (the
// first sleep only awaits the subscription's confirmation; the attempt
// after it sets the sleep that only its timer or a wake-up ends) and
// returns that sleep's bound: how long the waiter would sleep unless
// woken. It fails the test if that is under least, too short for a test
// that must tell a wake-up from the timer.
func awaitLongSleep(t testing.TB, sleeps <-chan WaitInfo, least time.Duration) time.Duration {
	t.Helper()
	for {
		w := recv(t, sleeps, 5*time.Second, "the waiter's sleep after subscribing")
		if w.Round < 2 {
			continue
		}
		if w.HolderTTL < least {
			t.Fatalf("the waiter sleeps only %v: the test needs a fallback of at least %v", w.HolderTTL, least)
		}
		return w.HolderTTL
	}
}

// TestFairUnlockWakesHead: an unlock wakes the head waiter (a Lock of
// another Client) on its own channel at once. The holder's lease is 1 min
// and the head sleeps until it runs out (its fallback) unless told: it
// must get the lock well within that.
func TestFairUnlockWakesHead(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	const lease = time.Minute
	holder := mustFair(t, newClient(t, nil), name, WithLease(lease))
	held := mustLock(t, ctx, holder)
	obs, sleeps := sleepReports()
	wc := newClient(t, nil, obs)
	w := mustFair(t, wc, name)
	lctx, cancel := context.WithTimeout(ctx, 2*lease)
	defer cancel()
	owner, got := fairWaiter(t, lctx, w, 1)
	fallback := awaitLongSleep(t, sleeps, lease/2)
	waitForSubscriber(t, wc, w.kind.channel(owner))
	start := time.Now()
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, fallback/10, "the head waiter after the unlock (its fallback: "+fallback.String()+")")
	t.Logf("head waiter acquired %v after the unlock (fallback %v)", time.Since(start), fallback)
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairAbandonWakesNextHead: when the head of a free lock's queue gives
// up, the next waiter is woken at once rather than when its timer runs out.
// The queue is [head:1 mid:2 W] while a 1 min lease holds the lock: W, a
// real Lock of another Client, is not right behind the head, so it sleeps
// until the lease runs out (its fallback, ~1 min; the waiter right behind
// the head would check every second). mid:2 leaves (W moves up, no
// wake-up), the holder unlocks (waking head:1, which never comes) and
// head:1 leaves: that abandon must wake W, well within its fallback.
func TestFairAbandonWakesNextHead(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	const lease = time.Minute
	c := newClient(t, nil)
	holder := mustFair(t, c, name, WithLease(lease))
	held := mustLock(t, ctx, holder)
	k := holder.kind.(*fairKind)
	head := request{owner: "head:1", lease: time.Second, wait: true}
	mid := request{owner: "mid:2", lease: time.Second, wait: true}
	for _, r := range []request{head, mid} {
		if res, err := k.attempt(ctx, r); err != nil || res.acquired {
			t.Fatalf("queueing %s: %+v, %v", r.owner, res, err)
		}
	}
	obs, sleeps := sleepReports()
	wc := newClient(t, nil, obs)
	next := mustFair(t, wc, name)
	lctx, cancel := context.WithTimeout(ctx, 2*lease)
	defer cancel()
	owner, got := fairWaiter(t, lctx, next, 3)
	fallback := awaitLongSleep(t, sleeps, lease/2)
	waitForSubscriber(t, wc, k.channel(owner))
	if _, err := k.leave(ctx, mid); err != nil {
		t.Fatal(err)
	}
	if q := fairQueue(t, c.rdb, name); !slices.Equal(q, []string{head.owner, owner}) {
		t.Fatalf("queue %v, want [%s %s]", q, head.owner, owner)
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	if _, err := k.leave(ctx, head); err != nil {
		t.Fatal(err)
	}
	limit := fallback / 10
	l := await(t, got, limit, "the next waiter after the head left the free lock (its fallback: "+fallback.String()+")")
	t.Logf("next waiter acquired %v after the head left (fallback %v)", time.Since(left), fallback)
	if err := next.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairCloseLeavesQueue: a Client closed while one of its Locks waits
// takes that waiter out of the queue.
func TestFairCloseLeavesQueue(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	holder := mustFair(t, c, name)
	held := mustLock(t, ctx, holder)
	defer holder.Unlock(held)
	wc := newClient(t, nil)
	m := mustFair(t, wc, name)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		errc <- err
	}()
	waitForQueue(t, c.rdb, name, 1)
	if err := wc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc, 5*time.Second, "waiting Lock after Close"); !errors.Is(err, ErrClosed) {
		t.Errorf("waiting Lock: %v, want ErrClosed", err)
	}
	if q := fairQueue(t, c.rdb, name); len(q) != 0 {
		t.Errorf("queue after Close: %v", q)
	}
}

func TestFairReentrancy(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	m := mustFair(t, c, name)
	l1 := mustLock(t, ctx, m)
	// A waiter in the queue does not stop the holder from re-entering.
	other := mustFair(t, newClient(t, nil), name)
	_, got := fairWaiter(t, ctx, other, 1)
	l2 := mustLock(t, l1, m)
	if n, err := m.HoldCount(l2); n != 2 || err != nil {
		t.Fatalf("HoldCount = %d, %v; want 2", n, err)
	}
	if err := m.Unlock(l2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("the waiter got the lock before the last Unlock")
	default:
	}
	if err := m.Unlock(l1); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(await(t, got, 10*time.Second, "waiter")); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(l1); !errors.Is(err, ErrNotHeld) {
		t.Errorf("extra Unlock: %v, want ErrNotHeld", err)
	}
	if n := c.watchdog.Len(); n != 0 {
		t.Errorf("watchdog still renews %d locks", n)
	}
}

// waitForSubscriber waits until some goroutine of c waits on channel with
// a confirmed subscription.
func waitForSubscriber(t testing.TB, c *Client, channel string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if c.hub.Waiters(channel) == 0 {
			return errors.New("no waiter yet")
		}
		n, err := c.rdb.PubSubNumSub(context.Background(), channel).Result()
		if err != nil || n[channel] == 0 {
			return fmt.Errorf("not subscribed yet (%v)", err)
		}
		return nil
	})
}

// TestFairLeaseAndWatchdog: a fixed lease runs out and the holder is told;
// a waiter gets the lock then without an unlock message. The watchdog
// keeps a lock without a lease.
func TestFairLeaseAndWatchdog(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	const timeout = 300 * time.Millisecond
	c := newClient(t, nil, WithWatchdogTimeout(timeout))
	leased := mustFair(t, c, name, WithLease(300*time.Millisecond))
	l := mustLock(t, ctx, leased)
	waiter := mustFair(t, c, name)
	_, got := fairWaiter(t, ctx, waiter, 1)
	awaitDone(t, l, 5*time.Second, "lock context at the end of its lease")
	if !errors.Is(context.Cause(l), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l))
	}
	wl := await(t, got, 5*time.Second, "waiter after the lease ran out")
	// The waiter holds without a lease: the watchdog renews it.
	for end := time.Now().Add(4 * timeout); time.Now().Before(end); time.Sleep(timeout / 10) {
		if wl.Err() != nil {
			t.Fatalf("lock context ended: %v", context.Cause(wl))
		}
	}
	if ttl, err := waiter.TTL(ctx); err != nil || ttl <= 0 {
		t.Error("lock expired while the watchdog should renew it")
	}
	if err := waiter.Unlock(wl); err != nil {
		t.Fatal(err)
	}
	if err := leased.Unlock(l); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock after the lease: %v, want ErrNotHeld", err)
	}
}

func TestFairFencing(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	a := mustFair(t, newClient(t, nil), name, WithFencing())
	b := mustFair(t, newClient(t, nil), name, WithFencing())
	next, last := tokenChecker(t)
	for range 3 {
		la := mustLock(t, ctx, a)
		next(la)
		la2 := mustLock(t, la, a) // reentrant acquisitions take a token too
		next(la2)
		_, got := fairWaiter(t, ctx, b, 1) // a queued grant too
		_ = a.Unlock(la2)
		_ = a.Unlock(la)
		lb := await(t, got, 10*time.Second, "queued waiter")
		next(lb)
		_ = b.Unlock(lb)
	}
	if v, _ := a.c.rdb.Get(ctx, prefixName(tokenPrefix, name)).Int64(); v != last() {
		t.Errorf("token key = %d, want %d", v, last())
	}
}

func TestFairForceUnlockWakesHead(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	holder := mustFair(t, newClient(t, nil, WithWatchdogTimeout(300*time.Millisecond)), name)
	l := mustLock(t, ctx, holder)
	waiter := mustFair(t, newClient(t, nil), name)
	_, got := fairWaiter(t, ctx, waiter, 1)
	if ok, err := waiter.ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := waiter.Unlock(r.lctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("head waiter not woken by ForceUnlock")
	}
	awaitDone(t, l, 5*time.Second, "old holder told by the watchdog")
	if !errors.Is(context.Cause(l), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l))
	}
	if ok, _ := waiter.ForceUnlock(ctx); ok {
		t.Error("ForceUnlock of a free lock reported a deletion")
	}
}

func TestNewFairMutexRejectsBadInput(t *testing.T) {
	c := newClient(t, nil)
	for _, name := range []string{"", "a}b", "x{}"} {
		if _, err := c.NewFairMutex(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewFairMutex(%q): %v, want ErrInvalidName", name, err)
		}
	}
	for _, o := range []LockOption{
		WithFairWaitTimeout(-time.Second), WithFairWaitTimeout(time.Millisecond),
		WithFairWaitTimeout(MaxLease + time.Second), WithLease(0),
	} {
		if _, err := c.NewFairMutex("ok", o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("bad option: %v, want ErrInvalidOption", err)
		}
	}
	var nilClient *Client
	if _, err := nilClient.NewFairMutex("ok"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil Client: %v", err)
	}
	m, err := c.NewFairMutex("order:{42}:pay", WithFairWaitTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	k := m.kind.(*fairKind)
	for _, key := range []string{k.queue, k.deadlines, k.channel("o:1"), k.token} {
		if slot(key) != slot(m.Name()) {
			t.Errorf("key %q is not in the lock's slot", key)
		}
	}
	if k.queue != "redisson_lock_queue:order:{42}:pay" || k.channel("u:1") != "redisson_lock__channel:order:{42}:pay:u:1" {
		t.Errorf("names %q %q are not Redisson's", k.queue, k.channel("u:1"))
	}
	c2 := newClient(t, nil)
	_ = c2.Close()
	if _, err := c2.NewFairMutex("ok"); !errors.Is(err, ErrClosed) {
		t.Errorf("NewFairMutex after Close: %v", err)
	}
}

// TestFairGrantMovesQueueUp: a waiter joins one wait per place past the
// lock's expiry; after a grant (here an unlock's hand-over) the new head,
// a dlock waiter, keeps a deadline at least one wait past the new hold
// (it keeps itself ahead; a Redisson new head is moved there:
// TestFairAttemptGrantPromotes, TestFairJavaWaiterAmongDlockGrants), and
// however many grants go by, a joiner's deadline stays one wait per place
// past the lock's expiry (no drift).
func TestFairGrantMovesQueueUp(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	holder := mustFair(t, c, name)
	held := mustLock(t, ctx, holder)
	wc := newClient(t, nil)
	m := mustFair(t, wc, name)
	wait := DefaultFairWaitTimeout.Milliseconds()
	// near reports whether deadline d is want, up to a minute early (the
	// time the test took since want's clock was read) and 5 s late.
	near := func(d, want int64) bool { return d > want-60_000 && d < want+5_000 }
	expiry := func() int64 {
		pttl, err := c.rdb.PTTL(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.Now().UnixMilli() + pttl.Milliseconds()
	}

	var owners []string
	var gots []<-chan lockResult
	for i := 1; i <= 3; i++ {
		o, got := fairWaiter(t, ctx, m, i)
		owners, gots = append(owners, o), append(gots, got)
		if d, _ := fairDeadline(t, c.rdb, name, o); !near(d, expiry()+int64(i)*wait) {
			t.Fatalf("waiter %d joined with deadline %d ms from now, want %d waits past the lock's expiry (%d)",
				i, d-time.Now().UnixMilli(), i, expiry()-time.Now().UnixMilli())
		}
	}

	// Hand the lock down the queue; a new waiter joins at each grant.
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		l := await(t, gots[0], 10*time.Second, fmt.Sprintf("head waiter, round %d", round))
		owners, gots = owners[1:], gots[1:]
		if d, _ := fairDeadline(t, c.rdb, name, owners[0]); d < expiry()+wait-60_000 {
			t.Fatalf("round %d: the new head's deadline is %d ms from now, want at least one wait past the new hold (%d)",
				round, d-time.Now().UnixMilli(), expiry()+wait-time.Now().UnixMilli())
		}
		o, got := fairWaiter(t, ctx, m, 3)
		owners, gots = append(owners, o), append(gots, got)
		if d, _ := fairDeadline(t, c.rdb, name, o); !near(d, expiry()+3*wait) {
			t.Fatalf("round %d: a joiner's deadline is %d ms from now, want 3 waits past the lock's expiry (%d): drift",
				round, d-time.Now().UnixMilli(), expiry()-time.Now().UnixMilli())
		}
		if err := m.Unlock(l); err != nil {
			t.Fatal(err)
		}
	}
	for i, got := range gots {
		if err := m.Unlock(await(t, got, 10*time.Second, fmt.Sprintf("waiter %d left", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFairFreeLockHeadToldOnce: a waiter that finds the lock free with
// another waiter at the head tells that head, but not again within
// fairFreeCheck (its attempt right after subscribing would), and tells it
// again after that, in case it missed the message.
func TestFairFreeLockHeadToldOnce(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c := newClient(t, nil)
	m := mustFair(t, c, name)
	head := "1b4e28ba-2fa1-11d2-883f-0016d3cca427:1" // a Java thread, say
	rdb := newRedis(t)
	far := time.Now().Add(time.Hour).UnixMilli()
	if err := rdb.ZAdd(ctx, prefixName(fairDeadlinePrefix, name), redis.Z{Score: float64(far), Member: head}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, prefixName(fairQueuePrefix, name), head).Err(); err != nil {
		t.Fatal(err)
	}
	sub := rdb.Subscribe(ctx, m.kind.(*fairKind).channel(head))
	defer sub.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sub.Receive(sctx); err != nil { // the SUBSCRIBE's confirmation
		t.Fatal(err)
	}

	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
	defer lcancel()
	errc := make(chan error, 1)
	go func() {
		_, err := m.Lock(lctx)
		errc <- err
	}()
	var told []time.Time
	for len(told) < 2 {
		if _, err := sub.ReceiveMessage(sctx); err != nil {
			t.Fatalf("the head was told %d times: %v", len(told), err)
		}
		told = append(told, time.Now())
	}
	if gap := told[1].Sub(told[0]); gap < fairFreeCheck/2 {
		t.Errorf("the head was told again after %v, want no sooner than about %v", gap, fairFreeCheck)
	}
	if err := recv(t, errc, 10*time.Second, "Lock behind the silent head"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("Lock behind a head that never takes the lock: %v", err)
	}
}

// TestFairContendedLockSubscribesFirst: once a waiting attempt found the
// fair lock taken, the next Lock subscribes before it joins the queue, and
// so sleeps after its one attempt instead of attempting again once its
// subscription is confirmed: when its first sleep starts (the Wait
// observer's Round 1, right after the attempt that queued it), it is
// subscribed to its channel already. Without the early subscription it
// subscribes only in that sleep, which ends at the confirmation with
// another attempt.
func TestFairContendedLockSubscribesFirst(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	holder := mustFair(t, c, name)
	held := mustLock(t, ctx, holder)

	type call struct{}
	var (
		wc   *Client
		kind *fairKind
	)
	rdb := newRedis(t)
	subscribed := make(chan bool, 1) // at the third Lock's first sleep
	wc = newClient(t, nil, WithObserver(Observer{Wait: func(ctx context.Context, _ LockInfo, w WaitInfo) {
		if n, ok := ctx.Value(call{}).(int); !ok || n != 3 || w.Round != 1 {
			return
		}
		q, err := rdb.LRange(context.Background(), prefixName(fairQueuePrefix, name), 0, -1).Result()
		ok := err == nil && len(q) == 3 && wc.hub.Waiters(kind.channel(q[2])) == 1
		if !ok {
			t.Logf("at the third Lock's first sleep: queue %q (%v)", q, err)
		}
		subscribed <- ok
	}}))
	m := mustFair(t, wc, name)
	kind = m.kind.(*fairKind)
	var got []<-chan lockResult
	for n := 1; n <= 3; n++ {
		_, g := fairWaiter(t, context.WithValue(ctx, call{}, n), m, n)
		got = append(got, g)
	}
	if !recv(t, subscribed, 10*time.Second, "the third Lock's first sleep") {
		t.Errorf("the third Lock was not subscribed to its channel when its first sleep started: it subscribes after its attempt, and attempts again")
	}

	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if err := m.Unlock(await(t, g, 10*time.Second, fmt.Sprintf("waiter %d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
}
