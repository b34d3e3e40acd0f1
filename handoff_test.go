package dlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHandoffBoundLetsOthersIn: goroutines of one Client keep a lock busy,
// passing it among themselves by hand-over (handoff.go), always with one
// of them queued for it. A Lock in another process (Client) must still get
// its turn: after handoffBound hand-overs in a row the release frees the
// lock and publishes. Without the bound the lock would never be free and
// the other Client would wait as long as the first one is busy.
func TestHandoffBoundLetsOthersIn(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name)
	var (
		wg     sync.WaitGroup
		rounds atomic.Int64
		stop   atomic.Bool
	)
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				l, err := m.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				rounds.Add(1)
				time.Sleep(time.Millisecond) // the work: the others queue meanwhile
				if err := m.Unlock(l); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	defer func() {
		stop.Store(true)
		awaitGroup(t, &wg, time.Minute, "the first Client's goroutines stopping")
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}()
	eventually(t, 10*time.Second, func() error {
		if rounds.Load() < 20 {
			return context.DeadlineExceeded
		}
		return nil
	})

	other := mustMutex(t, newClient(t, nil), name)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start, before := time.Now(), rounds.Load()
	l, err := other.Lock(wctx)
	if err != nil {
		t.Fatalf("the other Client's Lock, while the first Client took the lock %d times: %v", rounds.Load()-before, err)
	}
	t.Logf("the other Client got the lock after %v, while the first one took it %d times", time.Since(start), rounds.Load()-before)
	if err := other.Unlock(l); err != nil {
		t.Fatal(err)
	}
}
