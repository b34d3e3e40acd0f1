package dlock

// Tests of the fair lock's hand-over: a release gives the lock to a live
// dlock head waiter of any Client and tells it so (fair_release.lua), so
// that the head needs no attempt of its own.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// scriptRuns counts the runs of one script (EVALSHA or EVAL by its hash
// or source) that go through a go-redis client, alone or in pipelines.
type scriptRuns struct {
	s *redis.Script
	n atomic.Int64
}

func (r *scriptRuns) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && (a[1] == r.s.Hash() || a[1] == scripts.Source(r.s)) {
			r.n.Add(1)
		}
	}
}

func (r *scriptRuns) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.count(cmd)
		return next(ctx, cmd)
	}
}
func (r *scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.count(cmds...)
		return next(ctx, cmds)
	}
}

// TestFairReleaseHandsOver: an unlock hands the fair lock over to the head
// waiter, a Lock of another Client: the lock is the waiter's as soon as
// the unlock returns, the message on its channel says so, with the
// fencing token taken for it, and the waiter's Lock returns with that
// token, above the holder's, without another attempt.
func TestFairReleaseHandsOver(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	noChannelsLeft(t, name)
	messages := fairMessages(t, name)
	holder := mustFair(t, newClient(t, nil), name, WithFencing())
	held := mustLock(t, ctx, holder)
	rdb := newRedis(t)
	attempts := &scriptRuns{s: scripts.FairAcquire}
	rdb.AddHook(attempts)
	wc := newClient(t, rdb)
	w := mustFair(t, wc, name, WithFencing())
	owner, got := fairWaiter(t, ctx, w, 1)
	waitForSubscriber(t, wc, w.kind.channel(owner))
	queued := attempts.n.Load()
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if ok, err := wc.rdb.HExists(ctx, name, owner).Result(); err != nil || !ok {
		t.Fatalf("the head waiter %s does not hold the lock once the unlock returned (%v, %v)", owner, ok, err)
	}
	l := await(t, got, 10*time.Second, "the head waiter")
	if n := attempts.n.Load() - queued; n != 0 {
		t.Errorf("the head waiter attempted %d times after the hand-over, want 0", n)
	}
	msgs := messages()
	if len(msgs) != 1 || msgs[0].owner != owner || !strings.HasPrefix(msgs[0].payload, "h:") {
		t.Fatalf("messages %v, want one hand-over to %s", msgs, owner)
	}
	_, token, found := w.kind.(*fairKind).handedOver([]string{msgs[0].payload}, 0)
	before, _ := Token(held)
	if got, _ := Token(l); !found || got != token || got <= before {
		t.Errorf("the head's token %d, want the hand-over's %d (found %v), above the holder's %d", got, token, found, before)
	}
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairHandOverOtherLease: a hand-over sets the releaser's lease; a
// head whose handle has another lease does not take it as its own, but
// attempts and sets its own lease.
func TestFairHandOverOtherLease(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name) // the watchdog's lease, 30 s
	held := mustLock(t, ctx, holder)
	const lease = 5 * time.Second
	wc := newClient(t, nil)
	w := mustFair(t, wc, name, WithLease(lease))
	owner, got := fairWaiter(t, ctx, w, 1)
	waitForSubscriber(t, wc, w.kind.channel(owner))
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, 10*time.Second, "the head waiter")
	if pttl := wc.rdb.PTTL(ctx, name).Val(); pttl <= 0 || pttl > lease {
		t.Errorf("the head's lock has a TTL of %v, want its own lease %v at most", pttl, lease)
	}
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairHandOverFencedWithoutToken: a release by an unfenced handle
// hands the lock over without a token; a fenced head then takes a new
// one, above every earlier token, rather than the counter's last.
func TestFairHandOverFencedWithoutToken(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	c := newClient(t, nil)
	fenced := mustFair(t, c, name, WithFencing())
	first := mustLock(t, ctx, fenced)
	before, _ := Token(first)
	if err := fenced.Unlock(first); err != nil {
		t.Fatal(err)
	}
	holder := mustFair(t, c, name)
	held := mustLock(t, ctx, holder)
	wc := newClient(t, nil)
	w := mustFair(t, wc, name, WithFencing())
	owner, got := fairWaiter(t, ctx, w, 1)
	waitForSubscriber(t, wc, w.kind.channel(owner))
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	l := await(t, got, 10*time.Second, "the head waiter")
	if token, ok := Token(l); !ok || token <= before {
		t.Errorf("the head's token %d (%v), want one above the earlier %d", token, ok, before)
	}
	if err := w.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairLeaveAfterHandOver: a waiter that gives up after a release
// handed it the lock (its Lock never returned it) gives the lock back on
// leaving, to the next waiter, rather than hold it for a lease.
//
// TestFairDeadDlockWaiterLeaves and TestFairTryLockPastDeadWaiter check
// that a head that nobody listens for (its process died) is not handed
// the lock.
func TestFairLeaveAfterHandOver(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	wc := newClient(t, nil)
	fm := mustFair(t, wc, name)
	k := fm.kind.(*fairKind)
	gone := queuedListener(t, ctx, wc, k)
	next := mustFair(t, newClient(t, nil), name)
	_, got := fairWaiter(t, ctx, next, 2)
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if ok, err := wc.rdb.HExists(ctx, name, gone.owner).Result(); err != nil || !ok {
		t.Fatalf("the head waiter %s was not handed the lock (%v, %v)", gone.owner, ok, err)
	}
	fm.leave(gone) // as its Lock does when its ctx ends: the release path gives the lock back
	l := await(t, got, 10*time.Second, "the next waiter after the head left holding the lock")
	if err := next.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairDlockHeadKeepsItselfAhead: a waiter joining behind a dlock head
// leaves the head's deadline alone (one ZSCORE less per join); the head's
// own attempt, which it makes at least every half wait, moves its
// deadline past the lock's expiry by one wait; and a hand-over leaves the
// deadline of a dlock new head alone (no TIME, no ZADD). (A Redisson head is kept
// ahead by every attempt: TestFairJavaWaiterKeepsPlace.)
func TestFairDlockHeadKeepsItselfAhead(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	hc := newClient(t, nil)
	k := mustFair(t, hc, name).kind.(*fairKind)
	head := request{owner: hc.newOwner(), lease: time.Second, wait: true}
	if res, err := k.attempt(ctx, head); err != nil || res.acquired {
		t.Fatalf("queueing the head: %+v, %v", res, err)
	}
	// As if it had not attempted for long: due in a second.
	due := float64(time.Now().Add(time.Second).UnixMilli())
	deadlines := prefixName(fairDeadlinePrefix, name)
	if err := hc.rdb.ZAdd(ctx, deadlines, redis.Z{Score: due, Member: head.owner}).Err(); err != nil {
		t.Fatal(err)
	}
	jc := newClient(t, nil)
	joiner := request{owner: jc.newOwner(), lease: time.Second, wait: true}
	if res, err := mustFair(t, jc, name).kind.(*fairKind).attempt(ctx, joiner); err != nil || res.acquired {
		t.Fatalf("queueing the joiner: %+v, %v", res, err)
	}
	if d, _ := fairDeadline(t, hc.rdb, name, head.owner); float64(d) != due {
		t.Errorf("a joiner moved the dlock head's deadline from %v to %d", due, d)
	}
	if _, err := k.attempt(ctx, head); err != nil {
		t.Fatal(err)
	}
	floor := time.Now().Add(hc.rdb.PTTL(ctx, name).Val()+DefaultFairWaitTimeout).UnixMilli() - 1000
	if d, _ := fairDeadline(t, hc.rdb, name, head.owner); d < floor {
		t.Errorf("the head's own attempt left its deadline at %d, want past the lock's expiry by a wait (%d)", d, floor)
	}

	// The unlock hands the lock to the head (it listens) and leaves the
	// deadline of the dlock joiner, the new head, where it was.
	sub, err := hc.hub.Subscribe(ctx, k.channel(head.owner))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	recv(t, sub.Ready(), 5*time.Second, "the head's subscription")
	joined, _ := fairDeadline(t, hc.rdb, name, joiner.owner)
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if ok := hc.rdb.HExists(ctx, name, head.owner).Val(); !ok {
		t.Fatal("the unlock did not hand the lock to the head")
	}
	if d, _ := fairDeadline(t, hc.rdb, name, joiner.owner); d != joined {
		t.Errorf("the hand-over moved the new dlock head's deadline from %d to %d", joined, d)
	}
}

// TestFairAttemptGrantPromotes: a waiter that takes the lock with an
// attempt (it was woken, not handed the lock) gives the new head, a
// Redisson-shaped owner, one wait past the new hold (one ZADD), and
// leaves the waiter behind that one where it was.
func TestFairAttemptGrantPromotes(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	c := newClient(t, nil)
	k := mustFair(t, c, name).kind.(*fairKind)
	holder := request{owner: "holder:1", lease: time.Minute, wait: true}
	if res, err := k.attempt(ctx, holder); err != nil || !res.acquired {
		t.Fatalf("taking the lock: %+v, %v", res, err)
	}
	a := request{owner: "a:1", lease: 10 * time.Second, wait: true}
	b := request{owner: "b:2", lease: time.Second, wait: true}
	third := request{owner: "c:3", lease: time.Second, wait: true}
	for _, r := range []request{a, b, third} {
		if res, err := k.attempt(ctx, r); err != nil || res.acquired {
			t.Fatalf("queueing %s: %+v, %v", r.owner, res, err)
		}
	}
	before, _ := fairDeadline(t, c.rdb, name, third.owner)
	if err := c.rdb.Del(ctx, name).Err(); err != nil { // the holder's lease ran out
		t.Fatal(err)
	}
	if res, err := k.attempt(ctx, a); err != nil || !res.acquired {
		t.Fatalf("the head's attempt on the free lock: %+v, %v", res, err)
	}
	want := time.Now().UnixMilli() + a.lease.Milliseconds() + DefaultFairWaitTimeout.Milliseconds()
	if d, _ := fairDeadline(t, c.rdb, name, b.owner); d < want-5_000 || d > want+1_000 {
		t.Errorf("the new head's deadline is %d ms from now, want one wait past the new hold (%d)",
			d-time.Now().UnixMilli(), want-time.Now().UnixMilli())
	}
	if d, _ := fairDeadline(t, c.rdb, name, third.owner); d != before {
		t.Errorf("the waiter behind the new head moved from %d to %d", before, d)
	}
}
