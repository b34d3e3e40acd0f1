package watchdog

import (
	"context"
	"sync"
	"testing"
	"time"
)

// renewals records which entries each renewal covered.
type renewals struct {
	mu   sync.Mutex
	seen map[int]int
}

func (r *renewals) renew(_ context.Context, _ string, chunk []int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range chunk {
		r.seen[e]++
	}
	return nil
}

func (r *renewals) count(e int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[e]
}

// isRunning reports whether a loop is running (or about to end by Close).
func (w *Watchdog[T]) isRunning() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stop != nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoopStopsWhenIdleAndRestarts: the loop outlives the last Remove until
// its next tick, which finds no entries and ends it; the next Add starts a
// new loop that renews again, and Close waits for it.
func TestLoopStopsWhenIdleAndRestarts(t *testing.T) {
	r := &renewals{seen: map[int]int{}}
	w := New(5*time.Millisecond, 10, func(int) string { return "g" }, r.renew, nil)
	w.Add(1)
	eventually(t, "entry 1 renewed", func() bool { return r.count(1) > 0 })
	w.Remove(1)
	eventually(t, "idle loop stopped", func() bool { return !w.isRunning() })
	after := r.count(1)

	w.Add(2)
	if !w.isRunning() {
		t.Fatal("Add after an idle stop did not start a loop")
	}
	eventually(t, "entry 2 renewed by the new loop", func() bool { return r.count(2) > 0 })
	if n := r.count(1); n != after {
		t.Fatalf("entry 1 renewed %d more times after Remove", n-after)
	}
	w.Close()
	if w.isRunning() {
		t.Fatal("loop still marked running after Close")
	}
	if w.Add(3) {
		t.Fatal("Add after Close accepted an entry")
	}
}

// TestRemoveKeepsLoopForNextAdd: a Client that takes and releases one lock
// at a time keeps one loop instead of starting one per Lock.
func TestRemoveKeepsLoopForNextAdd(t *testing.T) {
	r := &renewals{seen: map[int]int{}}
	w := New(time.Hour, 10, func(int) string { return "g" }, r.renew, nil)
	defer w.Close()
	for e := range 100 {
		w.Add(e)
		w.Remove(e)
	}
	w.mu.Lock()
	loops := w.loops
	w.mu.Unlock()
	if loops != 1 {
		t.Fatalf("%d loops started for 100 Add/Remove pairs, want 1", loops)
	}
}
