package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// awaitQueued waits until exactly n Locks of m's Client wait in its queue
// for m's lock (handoff.go), each subscribed (its Lock confirmed its
// subscription and made the attempt after it, so that only an unlock
// message, its timer or a hand-over wakes it), and returns their owners in
// queue order.
func awaitQueued(t *testing.T, m *Mutex, n int) []string {
	t.Helper()
	var owners []string
	eventually(t, 10*time.Second, func() error {
		c := m.c
		c.queues.mu.Lock()
		defer c.queues.mu.Unlock()
		owners = owners[:0]
		if q := c.queues.m[m.queueKey()]; q != nil {
			for _, p := range q.places {
				if !p.queued || !p.subscribed {
					return fmt.Errorf("a place of %s is not queued and subscribed yet", p.req.owner)
				}
				owners = append(owners, p.req.owner)
			}
		}
		if len(owners) != n {
			return fmt.Errorf("%d Locks queued and subscribed, want %d", len(owners), n)
		}
		return nil
	})
	return owners
}

// lockFields returns the fields (owners) of the lock hash name, failing the
// test on a Redis error.
func lockFields(t *testing.T, rdb redis.Cmdable, name string) []string {
	t.Helper()
	f, err := rdb.HKeys(context.Background(), name).Result()
	if err != nil {
		t.Fatalf("HKEYS %s: %v", name, err)
	}
	return f
}

// TestCancelledWaiterLeavesQueue: a Lock of a Client that waits for a lock
// another goroutine of the same Client holds, and whose ctx ends, leaves
// the Client's queue before it returns. The next Unlock must not hand the
// lock to its owner, who would hold it, unseen, for the 30 s default lease:
// the lock goes to the live waiter behind it ("before a live waiter"), or
// is free at once when there is none ("alone"), and another Client then
// gets it within 3 s (a tenth of that lease). The dead owner never appears
// as a field of the lock hash.
func TestCancelledWaiterLeavesQueue(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "before a live waiter"}[live], func(t *testing.T) {
			ctx := t.Context()
			name := lockName(t)
			c := newClient(t, nil)
			m := mustMutex(t, c, name)
			la := mustLock(t, ctx, m)

			bctx, cancelB := context.WithCancel(ctx)
			defer cancelB()
			bErr := make(chan error, 1)
			go func() {
				l, err := m.Lock(bctx)
				if err == nil {
					err = errors.Join(errors.New("the cancelled Lock got the lock"), m.Unlock(l))
				}
				bErr <- err
			}()
			dead := awaitQueued(t, m, 1)[0]

			type result struct {
				l   context.Context
				err error
			}
			cGot := make(chan result, 1)
			var liveOwner string
			if live {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				go func() {
					l, err := m.Lock(cctx)
					cGot <- result{l, err}
				}()
				liveOwner = awaitQueued(t, m, 2)[1]
			}

			cancelB()
			if err := recv(t, bErr, 5*time.Second, "the waiting Lock after its ctx was cancelled"); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled Lock: %v, want ErrNotObtained wrapping context.Canceled", err)
			}
			// Its place left the queue before its Lock returned.
			want := 0
			if live {
				want = 1
			}
			c.queues.mu.Lock()
			var left []string
			if q := c.queues.m[m.queueKey()]; q != nil {
				for _, p := range q.places {
					left = append(left, p.req.owner)
				}
			}
			c.queues.mu.Unlock()
			if slices.Contains(left, dead) || len(left) != want {
				t.Fatalf("queue after the cancelled Lock returned: %v; want %d place(s), without its owner %s", left, want, dead)
			}

			if err := m.Unlock(la); err != nil {
				t.Fatal(err)
			}
			if f := lockFields(t, c.rdb, name); slices.Contains(f, dead) {
				t.Fatalf("the Unlock handed the lock to the owner of the cancelled Lock: fields %v", f)
			}
			if live {
				r := recv(t, cGot, 3*time.Second, "the live waiter behind the cancelled one, after the Unlock")
				if r.err != nil {
					t.Fatalf("the live waiter: %v", r.err)
				}
				if f := lockFields(t, c.rdb, name); !slices.Equal(f, []string{liveOwner}) {
					t.Fatalf("lock fields while the live waiter holds it: %v, want [%s]", f, liveOwner)
				}
				if err := m.Unlock(r.l); err != nil {
					t.Fatal(err)
				}
			} else if exists(t, c.rdb, name) {
				t.Fatalf("the lock is still held after the only holder's Unlock: fields %v", lockFields(t, c.rdb, name))
			}

			other := mustMutex(t, newClient(t, nil), name)
			octx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			lo, err := other.Lock(octx)
			if err != nil {
				t.Fatalf("another Client's Lock within 3 s (the default lease is 30 s): %v; lock fields %v", err, lockFields(t, c.rdb, name))
			}
			if f := lockFields(t, c.rdb, name); slices.Contains(f, dead) || len(f) != 1 {
				t.Fatalf("lock fields while the other Client holds it: %v", f)
			}
			if err := other.Unlock(lo); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// pubWatch tells, release by release, whether a release published an
// unlock message on a lock's channel. Its connection is subscribed to the
// channel either as a pattern (PSUBSCRIBE, which PUBSUB NUMSUB does not
// count: the hand-over script sees no other process) or, when counted, as
// a channel (as another process's waiter is).
type pubWatch struct {
	t       *testing.T
	rdb     *redis.Client
	ps      *redis.PubSub
	channel string
	marker  string
	n       int
}

// watchPublishes subscribes to channel (see pubWatch) and to a marker
// channel of its own, and waits for both subscriptions to be confirmed.
// The subscription is closed with t.
func watchPublishes(t *testing.T, channel string, counted bool) *pubWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	w := &pubWatch{t: t, rdb: newRedis(t), channel: channel, marker: channel + ":test-marker"}
	if counted {
		w.ps = w.rdb.Subscribe(ctx, channel, w.marker)
	} else {
		w.ps = w.rdb.PSubscribe(ctx, channel, w.marker)
	}
	t.Cleanup(func() { _ = w.ps.Close() })
	for range 2 {
		v, err := w.ps.Receive(ctx)
		if err != nil {
			t.Fatalf("subscribing to %s: %v", channel, err)
		}
		if _, ok := v.(*redis.Subscription); !ok {
			t.Fatalf("subscribing to %s: got %T, want the confirmation", channel, v)
		}
	}
	return w
}

// published reports whether an unlock message went out on the channel
// since the last call. It publishes a marker of its own and reads what the
// connection received up to it: Redis delivers one connection's messages
// in the order they were published, so a release that returned before the
// marker was sent and published shows up before it.
func (w *pubWatch) published() bool {
	w.t.Helper()
	w.n++
	ctx, cancel := context.WithTimeout(w.t.Context(), 5*time.Second)
	defer cancel()
	mark := strconv.Itoa(w.n)
	if err := w.rdb.Publish(ctx, w.marker, mark).Err(); err != nil {
		w.t.Fatalf("publishing the marker: %v", err)
	}
	pub := false
	for {
		msg, err := w.ps.ReceiveMessage(ctx)
		if err != nil {
			w.t.Fatalf("waiting for marker %s on %s: %v", mark, w.marker, err)
		}
		switch {
		case msg.Channel == w.channel:
			pub = true
		case msg.Channel == w.marker && msg.Payload == mark:
			return pub
		}
	}
}

// chainEvent is a Lock of handChain that returned: who is the index of the
// goroutine of m's Client (1..n), or 0 for the other Client's Lock.
type chainEvent struct {
	who int
	l   context.Context
	err error
}

// handChain queues n Locks of m's Client (goroutines 1..n, each queued and
// subscribed before the next starts, so that they queue in that order)
// behind first, a lock context of m that holds the lock, and, when other
// is not nil, first one Lock of other (another Client), confirmed queued
// and subscribed before the chain starts. Then it releases the lock holder
// by holder: before each release every Lock still waiting is queued and
// subscribed; after it, w tells whether it published, and the next Lock
// must return within 5 s (a sixth of the 30 s default lease, which is how
// long a waiter that missed its turn sleeps). A release that did not
// publish handed the lock over: it must go to the first queued goroutine.
// With fencing, every Lock's token must be the counter's value and above
// the previous one. handChain returns, for each release by m's Client, in
// order, whether it published, and the order in which the Locks got the
// lock.
func handChain(t *testing.T, m *Mutex, first context.Context, other *Mutex, n int, w *pubWatch) (pubs []bool, order []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	got := make(chan chainEvent, n+1)
	otherLeft := other != nil
	if otherLeft {
		go func() {
			l, err := other.Lock(ctx)
			got <- chainEvent{0, l, err}
		}()
		awaitQueued(t, other, 1)
	}
	for i := 1; i <= n; i++ {
		go func() {
			l, err := m.Lock(ctx)
			got <- chainEvent{i, l, err}
		}()
		awaitQueued(t, m, i)
	}
	tokenKey := m.kind.(*mutexKind).token()
	prev, fenced := Token(first)
	holder, next := chainEvent{who: -1, l: first}, 1
	for step := 1; ; step++ {
		awaitQueued(t, m, n-next+1)
		um := m
		if holder.who == 0 {
			um = other
		}
		if err := um.Unlock(holder.l); err != nil {
			t.Fatalf("release %d (by Lock %d): %v", step, holder.who, err)
		}
		pub := w.published()
		if holder.who != 0 {
			pubs = append(pubs, pub)
		}
		if next > n && !otherLeft {
			return pubs, order
		}
		ev := recv(t, got, 5*time.Second, fmt.Sprintf("the next Lock after release %d (by Lock %d, published %v; releases of the first Client so far %v)", step, holder.who, pub, pubs))
		if ev.err != nil {
			t.Fatalf("Lock %d: %v", ev.who, ev.err)
		}
		if !pub && ev.who != next {
			t.Fatalf("release %d handed the lock to Lock %d, want the first queued one, %d", step, ev.who, next)
		}
		if fenced {
			tok, ok := Token(ev.l)
			v, err := m.c.rdb.Get(ctx, tokenKey).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if !ok || tok != v || tok <= prev {
				t.Fatalf("Lock %d after release %d (published %v): token %d (ok %v), counter %d, previous token %d: want the counter's new value", ev.who, step, pub, tok, ok, v, prev)
			}
			prev = tok
		}
		order = append(order, ev.who)
		if ev.who == 0 {
			otherLeft = false
		} else {
			next++
		}
		holder = ev
	}
}

// TestHandoffBoundExact: ten goroutines of one Client queue for a lock
// that an eleventh holds, while a Lock of another Client waits for it,
// subscribed (and a watching connection is subscribed too: PUBSUB NUMSUB
// counts more than this Client throughout). Releasing them one by one,
// the Client must hand the lock over exactly handoffBound (4) times in a
// row, then free it and publish; after that free the count starts again
// at 0 (4 more hand-overs, then a free), and the last release, with
// nobody of the Client queued, frees it. Whoever wins the race after the
// first free, the other Client gets the lock. Every Lock, handed over or
// not, gets the fencing token the counter shows, above the previous one.
func TestHandoffBoundExact(t *testing.T) {
	ctx := t.Context()
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name, WithFencing())
	other := mustMutex(t, newClient(t, nil), name, WithFencing())
	w := watchPublishes(t, m.kind.channel(""), true)
	first := mustLock(t, ctx, m)
	pubs, order := handChain(t, m, first, other, 10, w)
	t.Logf("order of the Locks: %v; releases of the first Client that published: %v", order, pubs)
	want := []bool{false, false, false, false, true, false, false, false, false, true, true}
	if !slices.Equal(pubs, want) {
		t.Errorf("releases of the first Client that published (freed the lock): %v, want %v (handoffBound = %d hand-overs in a row, then a free)", pubs, want, handoffBound)
	}
	if !slices.Contains(order, 0) {
		t.Errorf("the other Client never got the lock: order %v", order)
	}
}

// TestHandedLockLease: a lock handed over (WithLease 2 s, no watchdog)
// counts its lease from the release that handed it, not from the
// releasing holder's acquisition: the waiter's lock context must not end
// before the release started plus the lease less the local allowance
// (drift, kind.go), however long the previous holder held it (1 s here),
// and must end, lost, within 3 s after that.
func TestHandedLockLease(t *testing.T) {
	const lease = 2 * time.Second
	ctx := t.Context()
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name, WithLease(lease), WithFencing())
	acquired := time.Now()
	la := mustLock(t, ctx, m)
	type result struct {
		l   context.Context
		err error
	}
	got := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := m.Lock(wctx)
		got <- result{l, err}
	}()
	awaitQueued(t, m, 1)
	time.Sleep(time.Until(acquired.Add(time.Second))) // the holder's work: not a synchronisation
	released := time.Now()
	if err := m.Unlock(la); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 3*time.Second, "the handed Lock")
	if r.err != nil {
		t.Fatal(r.err)
	}
	tokA, _ := Token(la)
	if tok, ok := Token(r.l); !ok || tok <= tokA {
		t.Errorf("handed token %d (ok %v), previous holder's %d", tok, ok, tokA)
	}
	awaitDone(t, r.l, lease+3*time.Second, "the handed lock's lease")
	ended := time.Now()
	if !errors.Is(context.Cause(r.l), ErrLockLost) {
		t.Errorf("the handed lock context ended with %v, want ErrLockLost", context.Cause(r.l))
	}
	if d, valid := ended.Sub(released), lease-drift(lease); d < valid {
		t.Errorf("the handed lock was lost %v after the release that handed it, before its lease of %v less the allowance (%v)", d, lease, valid)
	}
	t.Logf("lost %v after the hand-over", ended.Sub(released))
	_ = m.Unlock(r.l)
}

// TestFreedWaiterNotStranded: when the release after handoffBound
// hand-overs frees the lock for other processes (a connection of another
// process is subscribed to the channel, but nobody of it waits), the
// waiter the release chose must get the free lock at once, whether the
// unlock message wakes it before or after the release tells it the lock
// was freed. A waiter that waited for the message again, after using it
// up, would sleep until its timer (the 30 s lease) with the lock free.
// In rounds 0 and 2 a hook (freeOrder) makes the message come first, the
// order that strands such a waiter; in rounds 1 and 3 the two race. Each
// Lock must come within 5 s.
func TestFreedWaiterNotStranded(t *testing.T) {
	ctx := t.Context()
	name := lockName(t)
	rdb := newRedis(t)
	order := &freeOrder{key: name}
	rdb.AddHook(order)
	m := mustMutex(t, newClient(t, rdb), name)
	w := watchPublishes(t, m.kind.channel(""), true)
	for round := range 4 {
		forced := round%2 == 0
		order.on.Store(forced)
		before := order.held.Load()
		first := mustLock(t, ctx, m)
		pubs, locks := handChain(t, m, first, nil, 5, w)
		if want := []bool{false, false, false, false, true, true}; !slices.Equal(pubs, want) {
			t.Fatalf("round %d: releases that published: %v, want %v; order %v", round, pubs, want, locks)
		}
		if n := order.held.Load() - before; forced && n != 1 {
			t.Fatalf("round %d: %d releases freed the lock after the waiter they chose was woken by the message (%d were not within 5 s), want 1", round, n, order.missed.Load())
		}
	}
}

// freeOrder is a go-redis hook for the Redis client of a Client whose
// releases hand its lock over. While on, after the reply of a release
// that chose a waiter of the Client and freed the lock instead
// (lock_release_to.lua answering {1, 0}: it published the unlock message)
// it holds the reply back, for 5 s at most, until that waiter sleeps in
// handedOver, waiting for the release's word: with its 30 s timer and its
// ctx live, only the unlock message gets it there first. The release then
// tells the waiter that it freed the lock after the message woke it. held
// counts the releases so ordered, missed those whose waiter did not get
// there within 5 s.
type freeOrder struct {
	key          string
	on           atomic.Bool
	held, missed atomic.Int32
}

func (o *freeOrder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *freeOrder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		o.check(cmd, err)
		return err
	}
}

func (o *freeOrder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			o.check(cmd, cmd.Err())
		}
		return err
	}
}

// check waits, if cmd (with the reply's error err) is a release of o.key
// that chose a waiter and freed the lock, until the waiter sleeps in
// handedOver.
func (o *freeOrder) check(cmd redis.Cmder, err error) {
	args := cmd.Args()
	c, ok := cmd.(*redis.Cmd)
	if !o.on.Load() || err != nil || !ok || len(args) < 4 || args[3] != o.key ||
		args[1] != scripts.LockReleaseTo.Hash() && args[1] != scripts.Source(scripts.LockReleaseTo) {
		return
	}
	if res, err := c.Int64Slice(); err != nil || !slices.Equal(res, []int64{1, 0}) {
		return // handed over, or not freed
	}
	if sleepsIn("dlock.(*waiter).handedOver(", 5*time.Second) {
		o.held.Add(1)
	} else {
		o.missed.Add(1)
	}
}

// sleepsIn reports whether a goroutine's stack shows a call of fn within
// timeout.
func sleepsIn(fn string, timeout time.Duration) bool {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n := runtime.Stack(buf, true); bytes.Contains(buf[:n], []byte(fn)) {
			return true
		}
	}
	return false
}
