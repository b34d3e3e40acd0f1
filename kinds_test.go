package dlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkMutualExclusion runs workers goroutines on each of clients Clients,
// with the lock newLocker makes on each Client, incrementing a Redis
// counter total times with a non-atomic GET then SET under the lock. Any
// overlap of two holders loses an increment or is seen directly.
func checkMutualExclusion(t *testing.T, name string, clients, workers, total int, newLocker func(*Client) Locker) {
	t.Helper()
	rdb := newRedis(t)
	counter := name + ":counter"
	ctx := boundedCtx(t, 2*time.Minute)
	var wg sync.WaitGroup
	var inside, overlaps atomic.Int32
	for range clients {
		l := newLocker(newClient(t, nil))
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range total / (clients * workers) {
					lctx, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					n, _ := rdb.Get(ctx, counter).Int()
					rdb.Set(ctx, counter, n+1, 0)
					inside.Add(-1)
					if err := l.Unlock(lctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, 2*time.Minute, "the workers")
	if n, _ := rdb.Get(ctx, counter).Int(); n != total {
		t.Errorf("counter = %d, want %d", n, total)
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping holds seen", overlaps.Load())
	}
}

// tokenChecker returns a function that fails the test unless each lock
// context it is given carries a fencing token higher than the last one.
func tokenChecker(t *testing.T) (next func(context.Context), last func() int64) {
	var prev int64
	next = func(l context.Context) {
		t.Helper()
		tok, ok := Token(l)
		if !ok || tok <= prev {
			t.Fatalf("token %d (ok %v) after %d: not strictly increasing", tok, ok, prev)
		}
		prev = tok
	}
	return next, func() int64 { return prev }
}

// lockAndUnlock locks l in a new goroutine (a new owner), unlocks it at
// once, and sends the first error, or nil, on the channel it returns.
func lockAndUnlock(ctx context.Context, l Locker) <-chan error {
	got := make(chan error, 1)
	go func() {
		lctx, err := l.Lock(ctx)
		if err == nil {
			err = l.Unlock(lctx)
		}
		got <- err
	}()
	return got
}
