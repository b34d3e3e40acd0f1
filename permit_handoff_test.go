package dlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// The permit hand-over (PermitSemaphore.handOver, psem_release_to.lua) and
// the counting wake-ups of permit waiters.

// queuedPlaces is how many waiters of c sleep in the queue for s's permits.
func queuedPlaces(c *Client, s *PermitSemaphore) int {
	c.queues.mu.Lock()
	defer c.queues.mu.Unlock()
	if q := c.queues.m[s.h.queueKey()]; q != nil {
		return len(q.places)
	}
	return 0
}

// channelMessages counts what is published on channel from now on.
func channelMessages(t *testing.T, rdb *redis.Client, channel string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ps := rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(boundedCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var msgs []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, m.Payload)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = ps.Close(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
}

// TestPermitSemaphoreHandOver: a release of a Client whose own waiters
// wait hands the permit to the longest waiter, in the order they came,
// without a message on the channel and without the permit ever being
// available: the next waiter's permit replaces the released one in the
// timeout zset.
func TestPermitSemaphoreHandOver(t *testing.T) {
	const waiters = 5
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb)
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	held, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs := channelMessages(t, rdb, layout.Prefixed(layout.SemChannelPrefix, name))

	type turn struct {
		i         int
		available int
		err       error
	}
	turns := make(chan turn, waiters)
	for i := range waiters {
		go func() {
			p, err := s.Acquire(ctx)
			if err != nil {
				turns <- turn{i: i, err: err}
				return
			}
			// Nobody could take the permit between the release and now.
			n, err := rdb.Get(ctx, name).Int()
			turns <- turn{i: i, available: n, err: err}
			if err := s.Release(p); err != nil {
				t.Error(err)
			}
		}()
		// The next waiter comes only once this one sleeps in the queue.
		eventually(t, 10*time.Second, func() error {
			if n := queuedPlaces(c, s); n != i+1 {
				return fmt.Errorf("%d waiters queued, want %d", n, i+1)
			}
			return nil
		})
	}
	if err := s.Release(held); err != nil {
		t.Fatal(err)
	}
	for want := range waiters {
		got := recv(t, turns, 10*time.Second, fmt.Sprintf("waiter %d's permit", want))
		switch {
		case got.err != nil:
			t.Fatalf("waiter %d: %v", got.i, got.err)
		case got.i != want:
			t.Fatalf("waiter %d had its turn where waiter %d should have: not in the order they came", got.i, want)
		case got.available != 0:
			t.Fatalf("waiter %d: %d available while it held the permit handed to it", got.i, got.available)
		}
	}
	// The last release had nobody to hand to: it freed the permit and
	// published the new count. The hand-overs before it published nothing.
	eventually(t, 10*time.Second, func() error {
		if m := msgs(); len(m) != 1 || m[0] != "1" {
			return fmt.Errorf("messages %v, want [1]: only the last release frees the permit", m)
		}
		return nil
	})
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreHandOverJavaTurn: while a Client keeps handing a
// permit among its own waiters, a Java (Redisson) waiter on the same
// semaphore still gets it: past permitHandoffBound hand-overs in a row the
// release frees the permit and publishes the count, which wakes Java.
func TestPermitSemaphoreHandOverJavaTurn(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb)
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	held, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 { // Go goroutines that take the permit in turn, forever
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				p, err := s.Acquire(wctx)
				cancel()
				if err != nil {
					continue // Java has it, or the test ends
				}
				time.Sleep(time.Millisecond) // the critical section
				if err := s.Release(p); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	eventually(t, 10*time.Second, func() error {
		if n := queuedPlaces(c, s); n < 2 {
			return fmt.Errorf("%d Go waiters queued, want 2", n)
		}
		return nil
	})
	java := newJavaSync(rdb, name)
	var javaID string
	jw := startJavaWaiter(t, java, java.semChannel(), func(ctx context.Context) (bool, error) {
		id, _, err := java.psemTryAcquire(ctx, time.Minute)
		javaID = id
		return id != "", err
	})
	released := time.Now()
	if err := s.Release(held); err != nil {
		t.Fatal(err)
	}
	d := jw.wokeWithin(t, released)
	t.Logf("Java waiter acquired %v after the Go waiters started handing the permit over (messages %v)", d, jw.messages())
	if ok, err := java.psemRelease(ctx, javaID); !ok || err != nil {
		t.Errorf("Java release: %v %v", ok, err)
	}
	close(stop)
	awaitGroup(t, &wg, 10*time.Second, "the Go goroutines")
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreCountedWake: AddPermits(2) with four waiters of one
// Client lets two in, by the message (long before a poll), and the two
// others are handed the permits when those are released.
func TestPermitSemaphoreCountedWake(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb)
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 0); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	got := make(chan context.Context, 4)
	for range 4 {
		go func() {
			p, err := s.Acquire(ctx)
			if err != nil {
				t.Error(err)
				p = nil
			}
			got <- p
		}()
	}
	eventually(t, 10*time.Second, func() error {
		if n := queuedPlaces(c, s); n != 4 {
			return fmt.Errorf("%d waiters queued, want 4", n)
		}
		return nil
	})
	added := time.Now()
	if err := s.AddPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var ps []context.Context
	for range 2 {
		p := recv(t, got, 10*time.Second, "a permit after AddPermits(2)")
		if p == nil {
			t.FailNow()
		}
		ps = append(ps, p)
	}
	if d := time.Since(added); d >= pushBound {
		t.Errorf("the two waiters took %v: woken by their poll, not by the message", d)
	}
	for _, p := range ps {
		if err := s.Release(p); err != nil { // handed to the two others
			t.Fatal(err)
		}
	}
	for range 2 {
		p := recv(t, got, 10*time.Second, "a permit handed over")
		if p == nil {
			t.FailNow()
		}
		if err := s.Release(p); err != nil {
			t.Fatal(err)
		}
	}
	wantAvailable(t, s, 2, 0)
}

// TestPermitSemaphoreHandOverAfterRetry: a waiter that tried again while
// it waited (each attempt has a permit id of its own) is handed the
// permit under the id of its latest attempt, the one its permit context
// carries: the permit is the waiter's in Redis, and its Release succeeds.
func TestPermitSemaphoreHandOverAfterRetry(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	rounds := make(chan int, 16)
	c := newClient(t, rdb, WithObserver(Observer{Wait: func(_ context.Context, l LockInfo, w WaitInfo) {
		if l.Name == name {
			rounds <- w.Round
		}
	}}))
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	held, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	if r := recv(t, rounds, 10*time.Second, "the waiter's first sleep"); r != 1 {
		t.Fatalf("round %d, want 1", r)
	}
	// A message with no permit behind it: the waiter tries again (a new
	// permit id), fails, and sleeps in the queue again.
	if err := rdb.Publish(ctx, s.channel, "1").Err(); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, rounds, 10*time.Second, "the waiter's second sleep"); r != 2 {
		t.Fatalf("round %d, want 2", r)
	}
	eventually(t, 10*time.Second, func() error {
		if n := queuedPlaces(c, s); n != 1 {
			return fmt.Errorf("%d waiters queued, want 1", n)
		}
		return nil
	})
	if err := s.Release(held); err != nil {
		t.Fatal(err)
	}
	p := recv(t, got, 10*time.Second, "the permit handed over")
	if p == nil {
		t.FailNow()
	}
	id, _ := s.PermitID(p)
	infos, err := s.Permits(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != id {
		t.Fatalf("permits in Redis %+v (%v); the waiter's permit context holds %s", infos, err, id)
	}
	if err := s.Release(p); err != nil {
		t.Fatalf("Release of the permit handed over: %v", err)
	}
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreNoHandOverBelowZero: after SetPermits shrank the
// semaphore below the permits held, a release gives its permit back to
// the pool, which needs it, instead of handing it to a waiter: never more
// permits held than the total.
func TestPermitSemaphoreNoHandOverBelowZero(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	c := newClient(t, rdb)
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p1, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Shrunk before the waiter comes: SetPermits publishes the new count,
	// and a waiter woken by it leaves the queue for a moment, when a
	// release would find nobody to hand to.
	if err := s.SetPermits(ctx, 1); err != nil { // available: -1
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	eventually(t, 10*time.Second, func() error {
		if n := queuedPlaces(c, s); n != 1 {
			return fmt.Errorf("%d waiters queued, want 1", n)
		}
		return nil
	})
	if err := s.Release(p1); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.ZCard(ctx, s.timeouts).Result(); n != 1 || err != nil {
		t.Fatalf("%d permits held after a release with the total at 1 and 2 held, want 1 (%v)", n, err)
	}
	wantAvailable(t, s, 0, 1)
	if err := s.Release(p2); err != nil { // now handed over
		t.Fatal(err)
	}
	p := recv(t, got, 10*time.Second, "the permit handed over")
	if p == nil {
		t.FailNow()
	}
	wantAvailable(t, s, 0, 1)
	if err := s.Release(p); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 1, 0)
}
