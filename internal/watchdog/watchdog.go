// Package watchdog renews leases in batches for every lock a Client holds.
//
// One goroutine per Watchdog wakes every interval while entries exist and
// hands them to a renew function in chunks: entries are grouped by a key the
// caller chooses (the renewal script and, on a cluster, the hash slot, since
// one script call may only touch one slot), and each group is cut into
// chunks of at most the batch size. What a renewal means, and what to do
// when a lock turns out to be gone, is the renew function's business.
package watchdog

import (
	"context"
	"sync"
	"time"
)

// Renew renews one chunk of entries that share a group. An error is
// reported to OnError and the entries are tried again at the next tick.
type Renew[T any] func(ctx context.Context, group string, chunk []T) error

// Watchdog renews registered entries every interval.
type Watchdog[T comparable] struct {
	interval time.Duration
	batch    int
	group    func(T) string
	renew    Renew[T]
	onError  func(error)

	mu      sync.Mutex
	entries map[T]struct{}
	stop    context.CancelFunc // stops the running loop; nil when idle
	loops   int                // loops started, for tests
	closed  bool
	running sync.WaitGroup
}

// New returns an idle watchdog. group assigns each entry its group; onError
// may be nil.
func New[T comparable](interval time.Duration, batch int, group func(T) string, renew Renew[T], onError func(error)) *Watchdog[T] {
	if onError == nil {
		onError = func(error) {}
	}
	return &Watchdog[T]{
		interval: interval, batch: batch, group: group, renew: renew, onError: onError,
		entries: map[T]struct{}{},
	}
}

// Add registers an entry; the loop starts with the first one. Add after
// Close does nothing and returns false.
func (w *Watchdog[T]) Add(e T) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.entries[e] = struct{}{}
	if w.stop == nil {
		var ctx context.Context
		ctx, w.stop = context.WithCancel(context.Background())
		w.loops++
		w.running.Add(1)
		go w.loop(ctx)
	}
	return true
}

// Remove unregisters an entry. Once Remove returns, the entry is not part of
// any renewal that starts later. The loop stops at its first tick that
// finds no entries rather than with the last Remove: a Client that takes
// and releases one lock at a time would otherwise start and stop a
// goroutine and a ticker on every Lock and Unlock, which costs more than
// the round trips themselves on a busy machine.
func (w *Watchdog[T]) Remove(e T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.entries, e)
}

// Len reports how many entries are registered.
func (w *Watchdog[T]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// Close stops the loop and waits for it; later Adds are refused.
func (w *Watchdog[T]) Close() {
	w.mu.Lock()
	w.closed = true
	clear(w.entries)
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	w.mu.Unlock()
	w.running.Wait()
}

func (w *Watchdog[T]) loop(ctx context.Context) {
	defer w.running.Done()
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.idle(ctx) {
				return
			}
			w.tick(ctx)
		}
	}
}

// idle reports whether the loop running with ctx should end: it was
// stopped, or it has no entries left, in which case it is marked stopped
// so that the next Add starts a new loop.
func (w *Watchdog[T]) idle(ctx context.Context) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Err() != nil {
		return true // stopped by Close; w.stop may belong to a newer loop
	}
	if len(w.entries) > 0 {
		return false
	}
	w.stop()
	w.stop = nil
	return true
}

// tick renews every entry once, chunk by chunk. A failed chunk does not
// stop the others.
func (w *Watchdog[T]) tick(ctx context.Context) {
	groups := map[string][]T{}
	w.mu.Lock()
	for e := range w.entries {
		g := w.group(e)
		groups[g] = append(groups[g], e)
	}
	w.mu.Unlock()
	for g, es := range groups {
		for len(es) > 0 && ctx.Err() == nil {
			n := min(len(es), w.batch)
			if err := w.renew(ctx, g, es[:n]); err != nil && ctx.Err() == nil {
				w.onError(err)
			}
			es = es[n:]
		}
	}
}
