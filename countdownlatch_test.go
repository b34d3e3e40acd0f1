package dlock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func mustLatch(t testing.TB, c *Client, name string) *CountDownLatch {
	t.Helper()
	l, err := c.NewCountDownLatch(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantCount(t testing.TB, l *CountDownLatch, want int) {
	t.Helper()
	got, err := l.Count(context.Background())
	if err != nil || got != want {
		t.Fatalf("count: %d, %v; want %d", got, err, want)
	}
}

func TestCountDownLatchOperations(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	l := mustLatch(t, newClient(t, nil), name)
	ps := newRedis(t).Subscribe(ctx, l.channel)
	defer ps.Close()
	if _, err := ps.Receive(boundedCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("subscribing to the latch's channel: %v", err)
	}
	wantCount(t, l, 0)
	if err := l.Await(ctx); err != nil { // open: returns at once
		t.Fatal(err)
	}
	if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v %v", ok, err)
	}
	if ok, err := l.TrySetCount(ctx, 5); ok || err != nil {
		t.Fatalf("second TrySetCount: %v %v; want false", ok, err)
	}
	wantCount(t, l, 2)
	if n, err := l.CountDown(ctx); n != 1 || err != nil {
		t.Fatalf("CountDown: %d %v; want 1", n, err)
	}
	if n, err := l.CountDown(ctx); n != 0 || err != nil {
		t.Fatalf("CountDown: %d %v; want 0", n, err)
	}
	if n, err := l.CountDown(ctx); n != 0 || err != nil { // open: nothing
		t.Fatalf("CountDown on an open latch: %d %v", n, err)
	}
	if n, _ := newRedis(t).Exists(ctx, name).Result(); n != 0 {
		t.Fatal("an open latch left its key")
	}
	if ok, err := l.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount after opening: %v %v", ok, err)
	}
	if ok, err := l.Delete(ctx); !ok || err != nil {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	wantCount(t, l, 0)
	// Redisson's messages: 1 (new count) at each set and at delete, 0 when
	// the count reaches 0. The test's own "end", published last, comes
	// after them all.
	if err := newRedis(t).Publish(ctx, l.channel, "end").Err(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	rctx := boundedCtx(t, 10*time.Second)
	for len(msgs) == 0 || msgs[len(msgs)-1] != "end" {
		m, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatalf("messages on the latch's channel: %v after %v", err, msgs)
		}
		msgs = append(msgs, m.Payload)
	}
	if want := []string{"1", "0", "1", "1", "end"}; !slices.Equal(msgs, want) {
		t.Fatalf("messages %v, want %v", msgs, want)
	}
}

func TestCountDownLatchBadInput(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	c := newClient(t, nil)
	l := mustLatch(t, c, lockName(t))
	for _, n := range []int{0, -3} {
		if _, err := l.TrySetCount(ctx, n); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("TrySetCount(%d): %v", n, err)
		}
	}
	var zero *CountDownLatch
	if err := zero.Await(ctx); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Await on a nil latch: %v", err)
	}
	if _, err := c.NewCountDownLatch("a}b"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("NewCountDownLatch(a}b): %v", err)
	}
	// A name with a hash tag is fine on one server, not on a cluster,
	// where Redisson's latch channel would be in another slot.
	if _, err := c.NewCountDownLatch("{tag}x"); err != nil {
		t.Errorf("NewCountDownLatch({tag}x) on one server: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CountDown(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("CountDown on a closed Client: %v", err)
	}
}

// TestCountDownLatchAwait: every waiter of two Clients returns when the
// count reaches 0 (the zero message reaches one waiter per Client), a
// waiter's ctx ends its wait, and Close ends a wait with ErrClosed.
func TestCountDownLatchAwait(t *testing.T) {
	testLatchAwait(t, func(t testing.TB) redis.UniversalClient { return newRedis(t) }, lockName(t))
}

func testLatchAwait(t *testing.T, newRDB func(t testing.TB) redis.UniversalClient, name string) {
	ctx := boundedCtx(t, time.Minute)
	c1, c2 := newClient(t, newRDB(t)), newClient(t, newRDB(t))
	l1, l2 := mustLatch(t, c1, name), mustLatch(t, c2, name)
	if ok, err := l1.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v %v", ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l1.Await(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await with a deadline on a closed latch: %v", err)
	}

	const perClient = 4
	done := make(chan time.Time, 2*perClient)
	for _, l := range []*CountDownLatch{l1, l2} {
		for range perClient {
			go func() {
				if err := l.Await(ctx); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
		}
	}
	waitForSyncWaiters(t, c1, l1.channel, perClient)
	waitForSyncWaiters(t, c2, l2.channel, perClient)
	if n, err := l2.CountDown(ctx); n != 1 || err != nil {
		t.Fatalf("CountDown: %d %v", n, err)
	}
	opened := time.Now()
	if _, err := l2.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for range 2 * perClient {
		select {
		case at := <-done:
			slowest = max(slowest, at.Sub(opened))
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter did not return when the latch opened")
		}
	}
	t.Logf("%d waiters on 2 Clients all returned within %v of the count reaching 0", 2*perClient, slowest)
	if slowest >= pushBound {
		t.Errorf("slowest waiter took %v: woken by its poll, not by the zero message", slowest)
	}

	if ok, err := l1.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount again: %v %v", ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- l1.Await(ctx) }()
	waitForSyncWaiters(t, c1, l1.channel, 1)
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Await when its Client closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Await not ended by Close")
	}
	if _, err := l2.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCountDownLatchRedissonInterop: a Java count-down wakes Go waiters,
// and a Go count-down wakes a Java waiter with Redisson's zero message.
func TestCountDownLatchRedissonInterop(t *testing.T) {
	testLatchInterop(t, newRedis(t), newClient(t, nil), lockName(t))
}

func testLatchInterop(t *testing.T, rdb redis.UniversalClient, c *Client, name string) {
	ctx := boundedCtx(t, time.Minute)
	java := newJavaSync(rdb, name)
	l := mustLatch(t, c, name)

	// Java sets and counts down; Go waits.
	if ok, err := java.latchTrySet(ctx, 1); !ok || err != nil {
		t.Fatalf("Java trySetCount: %v %v", ok, err)
	}
	wantCount(t, l, 1)
	got := make(chan time.Time, 2)
	for range 2 {
		go func() {
			if err := l.Await(ctx); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
	}
	waitForSyncWaiters(t, c, l.channel, 2)
	opened := time.Now()
	if err := java.latchCountDown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case at := <-got:
			d := at.Sub(opened)
			t.Logf("Go waiter returned %v after the Java count-down", d)
			if d >= pushBound {
				t.Errorf("Go waiter took %v: woken by its poll, not by the Java message", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Go waiter not woken by the Java count-down")
		}
	}

	// Go sets and counts down; Java waits as Redisson does: while the
	// count is above 0, on each message.
	if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v %v", ok, err)
	}
	jw := startJavaWaiter(t, java, java.latchChannel(), func(ctx context.Context) (bool, error) {
		n, err := rdb.Get(ctx, name).Int()
		if errors.Is(err, redis.Nil) {
			return true, nil
		}
		return n <= 0, err
	})
	if _, err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	opened = time.Now()
	if _, err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	d := jw.wokeWithin(t, opened)
	msgs := jw.messages()
	t.Logf("Java waiter returned %v after the Go count-down (messages %v)", d, msgs)
	if len(msgs) != 1 || msgs[0] != "0" {
		t.Errorf("Java waiter heard %v, want [0] (zero)", msgs)
	}
}

// TestCountDownLatchTopologies runs the wait and interop checks on a
// Sentinel setup and a cluster (sharded pub/sub).
func TestCountDownLatchTopologies(t *testing.T) {
	for _, tp := range []topology{sentinelTopology(t), clusterTopology(t)} {
		t.Run(tp.name, func(t *testing.T) {
			t.Run("await", func(t *testing.T) {
				testLatchAwait(t, tp.redis, topoName(t, tp))
			})
			t.Run("interop", func(t *testing.T) {
				testLatchInterop(t, tp.redis(t), newClient(t, tp.redis(t)), topoName(t, tp))
			})
			if tp.name == "cluster" {
				c := newClient(t, tp.redis(t))
				if _, err := c.NewCountDownLatch("{tag}x"); !errors.Is(err, ErrInvalidName) {
					t.Errorf("NewCountDownLatch({tag}x) on a cluster: %v", err)
				}
			}
		})
	}
}
