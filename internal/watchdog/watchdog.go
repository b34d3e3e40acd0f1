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
//
// Past capacity (more entries than the renew function gets through in an
// interval) a tick ends at its deadline with entries left, and the next
// one starts at once (ticks never pile up): it renews first the entries
// whose renewal was sent longest ago, so that every entry is renewed in
// turn, as often as the capacity allows, rather than some every tick and
// others never; and each such tick is reported (ReportLag).
package watchdog

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Lag describes a tick that did not renew every entry within its
// interval.
type Lag struct {
	// Left is how many entries the tick did not renew: not sent before
	// its deadline, or sent and not answered by then.
	Left int
	// Entries is how many entries the tick had to renew.
	Entries int
	// Oldest is how long ago, at the end of the tick, the last successful
	// renewal of the entry renewed longest ago was sent (or the entry
	// added): at most about two intervals while the watchdog keeps up.
	Oldest time.Duration
}

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
	lagging  bool            // the last tick left entries unrenewed; used by the running tick only
	onLag    func(Lag)
	epoch    time.Time // stamps count from it

	mu      sync.Mutex
	entries map[T]int64        // per entry, when its renewal was last sent (or it was added), since epoch
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
		group: group, renew: renew, onError: onError, onLag: func(Lag) {},
		entries: map[T]int64{}, epoch: time.Now(),
	}
}

// ReportLag makes the watchdog call f at the end of every tick that did
// not renew every entry within its interval. Call it before the first
// Add.
func (w *Watchdog[T]) ReportLag(f func(Lag)) { w.onLag = f }

// now is the time since epoch, the entries' stamps.
func (w *Watchdog[T]) now() int64 { return int64(time.Since(w.epoch)) }

// Add registers an entry; the loop starts with the first one. Add after
// Close does nothing and returns false.
func (w *Watchdog[T]) Add(e T) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if _, ok := w.entries[e]; !ok {
		w.entries[e] = w.now()
	}
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

	chunks := w.chunks()
	entries := 0
	for _, c := range chunks {
		entries += len(c.entries)
	}

	var (
		mu      sync.Mutex            // guards pending, failed, running
		pending = map[string]int{}    // per group: chunks started and not finished
		left    = 0                   // entries in chunks not renewed in time
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
	sent := 0
dispatch:
	for _, c := range chunks {
		g, chunk := c.group, c.entries
		select {
		case slots <- struct{}{}:
		case <-tickCtx.Done():
			break dispatch
		}
		sent++
		mu.Lock()
		pending[g]++
		running++
		left += len(chunk)
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
			if tickCtx.Err() == nil {
				left -= len(chunk) // answered (or failed) in time
			}
			if ok {
				failed[g] = failed[g] || err != nil
			}
			finish()
		}()
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
	for _, c := range chunks {
		f, called := failed[c.group]
		if pending[c.group] > 0 || f || !called && w.behind[c.group] {
			behind[c.group] = true
		}
	}
	w.behind = behind
	for _, c := range chunks[sent:] {
		left += len(c.entries)
	}
	w.lagging = left > 0 && ctx.Err() == nil
	if w.lagging {
		w.onLag(Lag{Left: left, Entries: entries, Oldest: w.oldest()})
	}
}

// chunk is a part of a group's entries renewed by one call.
type chunk[T any] struct {
	group   string
	entries []T
}

// chunks cuts the registered entries into the chunks of a tick, in the
// order they are sent: those of groups whose last renewal failed or hung
// after the others. After a tick that left entries unrenewed, entries
// whose renewal was sent longest ago come first (within each of those
// two parts), so that the next tick starts with those the last one did
// not reach.
func (w *Watchdog[T]) chunks() []chunk[T] {
	type stamped struct {
		e  T
		at int64
	}
	w.mu.Lock()
	all := make([]stamped, 0, len(w.entries))
	for e, at := range w.entries {
		all = append(all, stamped{e, at})
	}
	w.mu.Unlock()
	if w.lagging {
		slices.SortFunc(all, func(a, b stamped) int { return cmp.Compare(a.at, b.at) })
	}
	var out, last []chunk[T]
	open := map[string]int{} // per group, the index in out or last of its chunk being filled
	for _, s := range all {
		g := w.group(s.e)
		list := &out
		if w.behind[g] {
			list = &last
		}
		i, ok := open[g]
		if !ok || len((*list)[i].entries) == w.batch {
			*list = append(*list, chunk[T]{group: g, entries: make([]T, 0, min(w.batch, len(all)))})
			i = len(*list) - 1
			open[g] = i
		}
		(*list)[i].entries = append((*list)[i].entries, s.e)
	}
	return append(out, last...)
}

// oldest is how long ago the last successful renewal of the entry
// renewed longest ago was sent.
func (w *Watchdog[T]) oldest() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	var most int64
	for _, at := range w.entries {
		most = max(most, now-at)
	}
	return time.Duration(most)
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
	sent := w.now()
	chunk = slices.DeleteFunc(chunk, func(e T) bool {
		_, ok := w.entries[e]
		return !ok
	})
	w.mu.Unlock()
	if len(chunk) == 0 {
		return false, nil
	}
	if err := w.renew(ctx, group, chunk); err != nil {
		return true, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range chunk {
		if _, ok := w.entries[e]; ok {
			w.entries[e] = sent
		}
	}
	return true, nil
}
