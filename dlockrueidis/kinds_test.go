package dlockrueidis_test

// Every kind and synchronizer on rueidis, and across transports: a dlock
// Client on go-redis and one on rueidis keep the same Redis data, so they
// exclude each other on one lock and wake each other's waiters.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// wakeBound is how long a waiter may take to be woken by an unlock
// message; far below the 30 s lease it would otherwise wait out.
const wakeBound = 10 * time.Second

type lockerKind struct {
	name string
	// open returns the handle and its rival (the handle that excludes it)
	// on lock name of c and d.
	open func(t *testing.T, c, d *dlock.Client, name string) (dlock.Locker, dlock.Locker)
}

// must returns v, or panics (failing the test) on a setup error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var lockerKinds = []lockerKind{
	{"Mutex", func(t *testing.T, c, d *dlock.Client, name string) (dlock.Locker, dlock.Locker) {
		return must(c.NewMutex(name)), must(d.NewMutex(name))
	}},
	{"FairMutex", func(t *testing.T, c, d *dlock.Client, name string) (dlock.Locker, dlock.Locker) {
		return must(c.NewFairMutex(name)), must(d.NewFairMutex(name))
	}},
	{"ReadLock", func(t *testing.T, c, d *dlock.Client, name string) (dlock.Locker, dlock.Locker) {
		return must(c.NewRWMutex(name)).ReadLock(), must(d.NewRWMutex(name)).WriteLock()
	}},
	{"WriteLock", func(t *testing.T, c, d *dlock.Client, name string) (dlock.Locker, dlock.Locker) {
		return must(c.NewRWMutex(name)).WriteLock(), must(d.NewRWMutex(name)).WriteLock()
	}},
	{"MultiLock", func(t *testing.T, c, d *dlock.Client, name string) (dlock.Locker, dlock.Locker) {
		multi := func(x *dlock.Client) dlock.Locker {
			return must(dlock.NewMultiLock(must(x.NewMutex(name+":a")), must(x.NewFairMutex(name+":b"))))
		}
		return multi(c), multi(d)
	}},
}

func testName(t *testing.T) string {
	return "rueidis:" + strings.ReplaceAll(t.Name(), "/", ":")
}

// exclude checks that while l holds the lock its rival r cannot take it,
// that a waiting r.Lock is woken by l's Unlock, and then frees it. When
// waiting is not nil, l unlocks only once it reports the rival waiting.
func exclude(t *testing.T, l, r dlock.Locker, waiting ...func(context.Context) bool) {
	t.Helper()
	ctx := boundedCtx(t, 30*time.Second)
	held, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("rival TryLock while held = %v, want ErrNotObtained", err)
	}
	got := make(chan error, 1)
	var rheld context.Context
	go func() {
		var err error
		rheld, err = r.Lock(ctx)
		got <- err
	}()
	for _, w := range waiting {
		for !w(ctx) {
			if ctx.Err() != nil {
				t.Fatal("the rival never subscribed to wait")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := l.Unlock(held); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, got, wakeBound, "the rival's Lock after Unlock")
	if err := r.Unlock(rheld); err != nil {
		t.Fatal(err)
	}
}

// subscribed returns a waiting func for exclude: true once a channel whose
// name holds the lock's name has a subscriber on the test server.
func subscribed(t *testing.T, name string) func(context.Context) bool {
	rdb := newRedis(t)
	return func(ctx context.Context) bool {
		chans, err := rdb.PubSubChannels(ctx, "*"+name+"*").Result()
		if err != nil || len(chans) == 0 {
			return false
		}
		n, err := rdb.PubSubNumSub(ctx, chans...).Result()
		for _, c := range n {
			if err == nil && c > 0 {
				return true
			}
		}
		return false
	}
}

// TestKinds: every lock kind through the rueidis driver, between two
// rueidis Clients.
func TestKinds(t *testing.T) {
	for _, k := range lockerKinds {
		t.Run(k.name, func(t *testing.T) {
			l, r := k.open(t, newClient(t), newClient(t), testName(t))
			exclude(t, l, r, subscribed(t, testName(t)))
		})
	}
}

// TestCrossTransport: a go-redis Client and a rueidis Client exclude each
// other on one lock and wake each other's waiters, both ways.
func TestCrossTransport(t *testing.T) {
	for _, k := range lockerKinds {
		t.Run(k.name, func(t *testing.T) {
			g, r := newGoRedisClient(t), newClient(t)
			t.Run("RueidisHolds", func(t *testing.T) {
				l, w := k.open(t, r, g, testName(t))
				exclude(t, l, w, subscribed(t, testName(t)))
			})
			t.Run("GoRedisHolds", func(t *testing.T) {
				l, w := k.open(t, g, r, testName(t))
				exclude(t, l, w, subscribed(t, testName(t)))
			})
		})
	}
}

// TestSynchronizers: the semaphores and the latch on rueidis, a waiter
// woken by a go-redis Client's release.
func TestSynchronizers(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	r, g := newClient(t), newGoRedisClient(t)
	t.Run("Semaphore", func(t *testing.T) {
		rs, gs := must(r.NewSemaphore(testName(t))), must(g.NewSemaphore(testName(t)))
		if ok, err := rs.TrySetPermits(ctx, 1); !ok || err != nil {
			t.Fatalf("TrySetPermits = %v, %v", ok, err)
		}
		if err := rs.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- rs.Acquire(ctx, 1) }()
		if err := gs.Release(ctx, 1); err != nil {
			t.Fatal(err)
		}
		awaitDone(t, got, wakeBound, "Acquire after a go-redis Release")
		if err := rs.Release(ctx, 1); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PermitSemaphore", func(t *testing.T) {
		ps := must(r.NewPermitSemaphore(testName(t)))
		gs := must(g.NewPermitSemaphore(testName(t)))
		if ok, err := ps.TrySetPermits(ctx, 1); !ok || err != nil {
			t.Fatalf("TrySetPermits = %v, %v", ok, err)
		}
		permit, err := gs.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ps.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire with no permit left = %v, want ErrNotObtained", err)
		}
		got := make(chan error, 1)
		var mine context.Context
		go func() {
			var err error
			mine, err = ps.Acquire(ctx)
			got <- err
		}()
		if err := gs.Release(permit); err != nil {
			t.Fatal(err)
		}
		awaitDone(t, got, wakeBound, "Acquire after a go-redis Release")
		if err := ps.Release(mine); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("CountDownLatch", func(t *testing.T) {
		rl, gl := must(r.NewCountDownLatch(testName(t))), must(g.NewCountDownLatch(testName(t)))
		if ok, err := rl.TrySetCount(ctx, 1); !ok || err != nil {
			t.Fatalf("TrySetCount = %v, %v", ok, err)
		}
		got := make(chan error, 1)
		go func() { got <- rl.Await(ctx) }()
		if _, err := gl.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		awaitDone(t, got, wakeBound, "Await after a go-redis CountDown")
	})
}
