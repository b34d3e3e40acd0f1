package watchdog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// register adds entries without starting the loop, for tests that run
// ticks themselves.
func register[T comparable](w *Watchdog[T], es ...T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range es {
		w.entries[e] = w.now()
	}
}

// runTick runs one tick of w in the background and returns a function that
// ends it and waits for it, failing t if the tick outlives its cancellation
// by 10 s.
func runTick[T comparable](t *testing.T, w *Watchdog[T]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.tick(ctx)
	}()
	return func() {
		t.Helper()
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled tick did not end within 10s")
		}
	}
}

// TestTickSlowGroupsDoNotDelayOthers: chunks bound for a node that stopped
// answering (renew blocks until the tick ends) do not keep another group
// from being renewed within the same tick, even when that group is
// dispatched after all of them and they outnumber the parallel slots. The
// tick lasts an hour here, so only concurrency lets the fast group through.
func TestTickSlowGroupsDoNotDelayOthers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slow  int
		grace time.Duration
	}{
		{"fewer than the slots", parallel - 1, time.Hour},
		{"more than the slots", 3 * parallel, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu         sync.Mutex
				started    int
				ended      int
				allStarted = make(chan struct{})
				fast       = make(chan struct{})
				slowEnded  int
			)
			renew := func(ctx context.Context, g string, _ []string) error {
				if g == "fast" {
					// Renewed while every slow group hangs, not after.
					select {
					case <-allStarted:
					case <-ctx.Done():
						return ctx.Err()
					}
					mu.Lock()
					slowEnded = ended
					mu.Unlock()
					close(fast)
					return nil
				}
				mu.Lock()
				if started++; started == tc.slow {
					close(allStarted)
				}
				mu.Unlock()
				<-ctx.Done()
				mu.Lock()
				ended++
				mu.Unlock()
				return ctx.Err()
			}
			w := New(time.Hour, 10, func(e string) string { return e }, renew, nil)
			w.grace = tc.grace
			for i := range tc.slow {
				register(w, fmt.Sprintf("slow%d", i))
			}
			register(w, "fast")
			defer w.Close()
			w.behind = map[string]bool{"fast": true} // dispatched after every slow group

			stop := runTick(t, w)
			defer stop()
			select {
			case <-fast:
			case <-time.After(10 * time.Second):
				t.Fatal("the fast group was not renewed while the slow ones hung")
			}
			if slowEnded != 0 {
				t.Fatalf("the fast group was renewed only after %d slow groups gave up", slowEnded)
			}
		})
	}
}

// TestTickDeadlineIsOneInterval: the whole tick shares one deadline, one
// interval after it began, rather than one timeout per chunk.
func TestTickDeadlineIsOneInterval(t *testing.T) {
	const interval = time.Minute
	var (
		mu        sync.Mutex
		deadlines []time.Time
		last      time.Time // when the last renew was called
	)
	renew := func(ctx context.Context, _ string, _ []int) error {
		d, ok := ctx.Deadline()
		if !ok {
			return errors.New("no deadline")
		}
		mu.Lock()
		defer mu.Unlock()
		deadlines = append(deadlines, d)
		last = time.Now()
		return nil
	}
	failed := make(chan error, 3)
	w := New(interval, 1, func(int) string { return "g" }, renew, func(err error) { failed <- err })
	defer w.Close()
	w.parallel = 1 // chunks one after another: a per-chunk timeout would differ
	register(w, 1, 2, 3)
	before := time.Now()
	w.tick(context.Background())
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	if len(deadlines) != 3 {
		t.Fatalf("%d chunks renewed, want 3", len(deadlines))
	}
	for _, d := range deadlines {
		if !d.Equal(deadlines[0]) {
			t.Fatalf("chunks of one tick have deadlines %v", deadlines)
		}
	}
	if d := deadlines[0]; d.Before(before.Add(interval)) || d.After(last.Add(interval)) {
		t.Fatalf("deadline %v after the tick began, want %v", d.Sub(before), interval)
	}
}

// TestTickStopsAtDeadline: a renewal that hangs ends with the tick and is
// reported (a timeout is what tells the Client to look for a new master);
// one cut short by Close is not.
func TestTickStopsAtDeadline(t *testing.T) {
	errs := make(chan error, 10)
	cancelLoop := func() {}
	renew := func(ctx context.Context, _ string, _ []int) error {
		cancelLoop()
		<-ctx.Done()
		return ctx.Err()
	}
	w := New(20*time.Millisecond, 10, func(int) string { return "g" }, renew, func(err error) { errs <- err })
	register(w, 1)

	w.tick(context.Background())
	select {
	case err := <-errs:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("reported %v for a renewal that outlived its tick, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a renewal that outlived its tick was not reported")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancelLoop = cancel
	w.tick(ctx)
	w.Close() // waits for the renewal
	close(errs)
	for err := range errs {
		t.Errorf("reported %v for a renewal cut short by Close", err)
	}
}

// TestTickDoesNotWaitPastDeadline: a renewal that ignores its ctx (go-redis
// keeps reading until its ReadTimeout unless ContextTimeoutEnabled is set)
// does not hold up the tick past its deadline, its group goes last at the
// next tick, and Close waits for it.
func TestTickDoesNotWaitPastDeadline(t *testing.T) {
	release := make(chan struct{})
	var returned atomic.Bool
	renew := func(context.Context, string, []int) error {
		<-release
		returned.Store(true)
		return nil
	}
	w := New(20*time.Millisecond, 10, func(int) string { return "g" }, renew, nil)
	register(w, 1)
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		w.tick(context.Background())
	}()
	select {
	case <-ticked:
	case <-time.After(10 * time.Second):
		t.Error("the tick waited for a renewal past its deadline")
	}
	close(release)
	select {
	case <-ticked:
	case <-time.After(10 * time.Second):
		t.Fatal("the tick did not end after its renewal returned")
	}
	if !w.behind["g"] {
		t.Error("a group whose renewal outlived the tick is not behind")
	}
	w.Close()
	if !returned.Load() {
		t.Error("Close returned before the renewal")
	}
}

// TestTickLimitsConcurrency: no more than parallel chunks are renewed at
// once while they answer within the grace period.
func TestTickLimitsConcurrency(t *testing.T) {
	var (
		inflight, most atomic.Int32
		gate           = make(chan struct{})
	)
	renew := func(ctx context.Context, _ string, _ []int) error {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w := New(time.Hour, 1, func(e int) string { return strconv.Itoa(e) }, renew, nil)
	defer w.Close()
	for e := range 3 * parallel {
		register(w, e)
	}
	stop := runTick(t, w)
	eventually(t, "the slots filled", func() bool { return inflight.Load() == parallel })
	close(gate)
	stop()
	if m := most.Load(); m != parallel {
		t.Fatalf("%d chunks renewed at once, want %d", m, parallel)
	}
}

// TestRemoveDuringTickSkipsLaterChunks: an entry removed while a tick is
// under way is not renewed by a later chunk of that tick (Redisson #7272:
// the lock was released and may be taken again with a fixed lease, which a
// renewal would stretch). One slot makes the chunks run one after another.
func TestRemoveDuringTickSkipsLaterChunks(t *testing.T) {
	var (
		w      *Watchdog[int]
		chunks [][]int
	)
	renew := func(_ context.Context, _ string, chunk []int) error {
		if len(chunks) == 0 {
			for e := range 3 {
				if e != chunk[0] {
					w.Remove(e)
				}
			}
		}
		chunks = append(chunks, slices.Clone(chunk))
		return nil
	}
	w = New(time.Hour, 1, func(int) string { return "g" }, renew, nil)
	defer w.Close()
	w.parallel = 1
	register(w, 0, 1, 2)
	w.tick(context.Background())
	if len(chunks) != 1 {
		t.Fatalf("renewed chunks %v; the first one removed every other entry", chunks)
	}
}

// TestTickRenewsFailedGroupsLast: a group whose renewal failed at the last
// tick goes after the others, so that chunks stuck on a dead node are not
// the first to take the slots again.
func TestTickRenewsFailedGroupsLast(t *testing.T) {
	var (
		order []string
		ticks int
	)
	renew := func(_ context.Context, g string, _ []string) error {
		order = append(order, g)
		if g == "bad" && ticks == 0 {
			return errors.New("node down")
		}
		return nil
	}
	w := New(time.Hour, 10, func(e string) string { return e }, renew, nil)
	defer w.Close()
	w.parallel = 1
	register(w, "bad")
	for i := range 10 {
		register(w, fmt.Sprintf("good%d", i))
	}
	w.tick(context.Background())
	ticks++
	if !w.behind["bad"] || len(w.behind) != 1 {
		t.Fatalf("groups behind after the first tick: %v, want bad", w.behind)
	}
	order = order[:0]
	w.tick(context.Background())
	if len(order) != 11 || order[10] != "bad" {
		t.Fatalf("second tick renewed %v, want bad last", order)
	}
	if len(w.behind) != 0 {
		t.Fatalf("groups behind after a tick without failures: %v", w.behind)
	}
}

// TestPastCapacityRenewsInTurnAndReportsLag: when the renew function gets
// through only a part of the entries in an interval (one at a time, as
// Redis runs one script at a time), every tick ends with entries left and
// reports it, the next tick starts with the entries renewed longest ago,
// so that every entry is renewed in turn: no entry is renewed much more
// often than another, none is left behind.
func TestPastCapacityRenewsInTurnAndReportsLag(t *testing.T) {
	const (
		entries  = 30
		interval = 40 * time.Millisecond
		cost     = 8 * time.Millisecond // about 5 renewals per tick
	)
	var (
		busy sync.Mutex // one renewal at a time
		r    = &renewals{seen: map[int]int{}}
		lags atomic.Int64
	)
	slow := func(ctx context.Context, g string, chunk []int) error {
		busy.Lock()
		defer busy.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(cost) // the renewal's cost, not synchronisation
		if err := ctx.Err(); err != nil {
			return err // cut short: not renewed
		}
		return r.renew(ctx, g, chunk)
	}
	w := New(interval, 1, func(int) string { return "g" }, slow, nil)
	w.ReportLag(func(l Lag) {
		if l.Left <= 0 || l.Entries != entries || l.Oldest <= 0 {
			t.Errorf("lag reported as %+v for %d entries", l, entries)
		}
		lags.Add(1)
	})
	defer w.Close()
	for e := range entries {
		w.Add(e)
	}
	// Until every entry was renewed 3 times: about 18 ticks in turn.
	eventually2 := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within a minute: %s (renewals per entry %v)", what, r.counts(entries))
			}
		}
	}
	eventually2("every entry renewed 3 times", func() bool { return slices.Min(r.counts(entries)) >= 3 })
	counts := r.counts(entries)
	if most := slices.Max(counts); most > 3+3 {
		t.Errorf("renewals per entry %v: an entry renewed %d times while another only 3, want in turn", counts, most)
	}
	if lags.Load() == 0 {
		t.Error("no lag reported while every tick left entries unrenewed")
	}
}

// counts returns how many times each of the entries 0..n-1 was renewed.
func (r *renewals) counts(n int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, n)
	for e := range n {
		out[e] = r.seen[e]
	}
	return out
}
