package dlock

// The local deadlines of a Client's holds are kept in one queue swept by
// one timer (expiry.go): these tests let many holds run past their
// deadline at once and check that they end without a goroutine each, and
// that a renewal that came in time keeps a hold the queue had due.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestOverdueHoldsEndWithoutAGoroutineEach: holds whose local deadlines
// pass while the registry is busy (its mutex held, as when renewals fall
// behind and the watchdog and the acquirers contend for it) are ended by
// one sweep, not by a goroutine per hold piling up on the mutex; once the
// mutex is free every one of them is lost with ErrLockLost.
func TestOverdueHoldsEndWithoutAGoroutineEach(t *testing.T) {
	const (
		n     = 300
		lease = 5 * time.Second // long enough to take every lock first
	)
	ctx := boundedCtx(t, 2*time.Minute)
	c := newClient(t, nil)
	name := lockName(t)
	lockCtxs := make([]context.Context, n)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				l, err := mustMutex(t, c, fmt.Sprintf("%s:%d", name, i), WithLease(lease)).Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				lockCtxs[i] = l
			}
		})
	}
	awaitGroup(t, &wg, time.Minute, "taking the locks")
	if t.Failed() {
		return
	}
	before := runtime.NumGoroutine()

	c.holds.mu.Lock()
	if len(c.holds.holds) != n {
		c.holds.mu.Unlock()
		t.Fatalf("%d holds registered, want %d: taking the locks took longer than their lease", len(c.holds.holds), n)
	}
	var last time.Time
	for _, hd := range c.holds.holds {
		if hd.until.After(last) {
			last = hd.until
		}
	}
	time.Sleep(time.Until(last) + 500*time.Millisecond) // every deadline passes with the mutex held
	during := runtime.NumGoroutine()
	c.holds.mu.Unlock()

	if during-before > n/10 {
		t.Errorf("%d goroutines while %d holds were overdue, %d before: a goroutine per hold", during, n, before)
	}
	for i, l := range lockCtxs {
		awaitDone(t, l, 10*time.Second, fmt.Sprintf("lock context %d after its deadline", i))
		if err := context.Cause(l); !errors.Is(err, ErrLockLost) {
			t.Fatalf("lock context %d ended with %v, want ErrLockLost", i, err)
		}
	}
	if n := c.watchdog.Len(); n != 0 {
		t.Errorf("the watchdog still keeps %d holds after they were lost", n)
	}
}
