// Package watchdog renews leases in batches for every lock a Client holds.
//
// One goroutine per Watchdog wakes every interval while entries exist and
// hands them to a renew function in chunks: entries are grouped by a key the
// caller chooses (the renewal script and, on a cluster, the hash slot, since
// one script call may only touch one slot), and each group is cut into
// chunks of at most the batch size. What a renewal means, and what to do
// when a lock turns out to be gone, is the renew function's business.
//
// A tick has one deadline, the next tick, and renews its chunks a few at a
// time concurrently: a node that stopped answering then costs its own
// chunks their renewal, never the chunks bound for healthy nodes.
package watchdog

import (
	"context"
	"slices"
	"sync"
	"time"
)

const (
	// parallel is how many chunks a tick renews at once. More would only
	// crowd the connection pools the application itself uses.
	parallel = 8
	// graceShare sets how long a chunk being renewed holds one of the
	// parallel slots: interval/graceShare (a healthy node answers in far
	// less). A tick gets past parallel*graceShare chunks stuck on dead
	// nodes before a healthy chunk queued behind them misses its tick.
	graceShare = 64
)

// Renew renews one chunk of entries that share a group. Its ctx ends with
// the tick (one interval after the tick began) or with Close. Chunks are
// renewed concurrently, so Renew must be safe for concurrent use. An error
// is reported to onError and the entries are tried again at the next tick.
type Renew[T any] func(ctx context.Context, group string, chunk []T) error

// Watchdog renews registered entries every interval.
type Watchdog[T comparable] struct {
	interval time.Duration
	batch    int
	parallel int           // chunks renewed at once, not counting those past grace
	grace    time.Duration // how long a chunk being renewed holds its slot
	group    func(T) string
	renew    Renew[T]
	onError  func(error)
	behind   map[string]bool // groups whose last renewal failed; used by the running tick only

	mu      sync.Mutex
	entries map[T]struct{}
	stop    context.CancelFunc // stops the running loop; nil when idle
	loops   int                // loops started, for tests
	closed  bool
	running sync.WaitGroup
}

// New returns an idle watchdog that renews every interval, in chunks of at
// most batch entries (batch >= 1). group assigns each entry its group.
// onError may be nil; it is called from several goroutines at once when
// several chunks fail, and a renewal cut short by the end of its tick is
// reported too.
func New[T comparable](interval time.Duration, batch int, group func(T) string, renew Renew[T], onError func(error)) *Watchdog[T] {
	if onError == nil {
		onError = func(error) {}
	}
	return &Watchdog[T]{
		interval: interval, batch: batch, parallel: parallel, grace: interval / graceShare,
		group: group, renew: renew, onError: onError,
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

// Remove unregisters an entry. Once Remove returns, no renewal that starts
// afterwards includes the entry, even within a tick already under way (a
// renewal starts when its chunk is checked against the registered entries,
// just before the renew function is called). A renewal that started
// earlier may still be running, and its command may still reach Redis
// after Remove returns: Remove does not wait for it. The loop stops at its first tick that
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

// Close stops the loop and waits for it, and for any renewal still running
// (a renewal that ignores its ctx may outlive its tick); later Adds are
// refused.
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

// tick renews every registered entry once, within one interval: the next
// tick starts then, and a lease is three intervals long, so a renewal still
// unanswered by then is better tried afresh. Chunks run concurrently, so
// that a node that stopped answering holds up only the chunks sent to it,
// not those of every other node (on a cluster each slot is its own group).
// Groups whose renewal failed or hung at their last try go after the
// others. A failed chunk does not stop the others.
//
// tick returns at its deadline even if a renewal has not: a Redis client
// may keep reading past its ctx's deadline (go-redis does, unless
// ContextTimeoutEnabled is set, until its ReadTimeout), and the next tick
// must not wait for that. Such a renewal finishes on its own; Close waits
// for it.
func (w *Watchdog[T]) tick(ctx context.Context) {
	tickCtx, cancel := context.WithTimeout(ctx, w.interval)
	defer cancel()

	groups := map[string][]T{}
	w.mu.Lock()
	for e := range w.entries {
		g := w.group(e)
		groups[g] = append(groups[g], e)
	}
	w.mu.Unlock()
	order := make([]string, 0, len(groups))
	var last []string
	for g := range groups {
		if w.behind[g] {
			last = append(last, g)
		} else {
			order = append(order, g)
		}
	}
	order = append(order, last...)

	var (
		mu      sync.Mutex            // guards pending, failed, running
		pending = map[string]int{}    // per group: chunks started and not finished
		failed  = map[string]bool{}   // per group that called renew: whether a call failed
		running = 1                   // chunks not finished, plus 1 while dispatching
		done    = make(chan struct{}) // closed when running drops to 0
		slots   = make(chan struct{}, w.parallel)
	)
	finish := func() {
		if running--; running == 0 {
			close(done)
		}
	}
dispatch:
	for _, g := range order {
		for chunk := range slices.Chunk(groups[g], w.batch) {
			select {
			case slots <- struct{}{}:
			case <-tickCtx.Done():
				break dispatch
			}
			mu.Lock()
			pending[g]++
			running++
			mu.Unlock()
			w.running.Add(1)
			go func() {
				defer w.running.Done()
				// A chunk still unanswered after grace is most likely
				// waiting for a node that stopped answering: it gives up
				// its slot (but goes on waiting), so that even many such
				// chunks cannot starve the others. At worst every chunk
				// of the tick has a goroutine.
				free := time.AfterFunc(w.grace, func() { <-slots })
				ok, err := w.renewChunk(tickCtx, g, chunk)
				if free.Stop() {
					<-slots
				}
				// A renewal cut short by the tick's deadline is reported
				// (the caller may learn from a timeout that a node is
				// gone), one cut short by Close is not.
				if ok && err != nil && ctx.Err() == nil {
					w.onError(err)
				}
				mu.Lock()
				defer mu.Unlock()
				pending[g]--
				if ok {
					failed[g] = failed[g] || err != nil
				}
				finish()
			}()
		}
	}
	mu.Lock()
	finish()
	mu.Unlock()
	select {
	case <-done:
	case <-tickCtx.Done():
	}

	mu.Lock()
	defer mu.Unlock()
	behind := map[string]bool{}
	for g := range groups {
		f, called := failed[g]
		if pending[g] > 0 || f || !called && w.behind[g] {
			behind[g] = true
		}
	}
	w.behind = behind
}

// renewChunk renews the entries of chunk that are still registered, unless
// the tick is over. Checking just before the call is what makes Remove's
// promise hold for the later chunks of a tick already under way: an entry
// removed (a lock released, and maybe taken again with a fixed lease) must
// not have its lease set again by a renewal that starts afterwards. called
// reports whether renew was called.
func (w *Watchdog[T]) renewChunk(ctx context.Context, group string, chunk []T) (called bool, err error) {
	if ctx.Err() != nil {
		return false, nil
	}
	w.mu.Lock()
	chunk = slices.DeleteFunc(chunk, func(e T) bool {
		_, ok := w.entries[e]
		return !ok
	})
	w.mu.Unlock()
	if len(chunk) == 0 {
		return false, nil
	}
	return true, w.renew(ctx, group, chunk)
}
