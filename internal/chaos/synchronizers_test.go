package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The synchronizer scenarios run in one process: three dlock Clients, each
// on its own go-redis client, with four workers each, contend for N
// permits while a fault runs. A worker's hold interval lies inside the
// time it believed it held its permit (it ends when its permit context is
// cancelled, if that comes first), so more than N intervals overlapping at
// one instant is a violation.

const semPermits = 3

// awaitGroup waits for wg, failing the test if its goroutines have not all
// finished within timeout: a test waits for nothing without a bound.
func awaitGroup(t *testing.T, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("%s: not finished within %v", what, timeout)
	}
}

// semFault is a fault injected on the semaphore's Redis until ctx ends; it
// returns how many times it struck.
type semFault func(ctx context.Context, srv *redistest.Server) int

func killPubSub(ctx context.Context, srv *redistest.Server) int {
	rdb := srv.Client()
	defer rdb.Close()
	return every(ctx, 20*time.Millisecond, func() error { return rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err() })
}

func flushScripts(ctx context.Context, srv *redistest.Server) int {
	rdb := srv.Client()
	defer rdb.Close()
	return every(ctx, 5*time.Millisecond, func() error { return rdb.ScriptFlush(ctx).Err() })
}

func restartRedis(ctx context.Context, srv *redistest.Server) int {
	return every(ctx, 300*time.Millisecond, func() error {
		srv.Kill()
		return srv.Restart()
	})
}

func TestPermitSemaphoreChaos(t *testing.T) {
	for _, f := range []struct {
		name  string
		args  []string
		fault semFault
	}{
		{"no faults", nil, nil},
		{"pub/sub connections killed", nil, killPubSub},
		{"SCRIPT FLUSH loop", nil, flushScripts},
		{"Redis restarted (AOF always)", []string{"--appendonly", "yes", "--appendfsync", "always"}, restartRedis},
	} {
		t.Run(f.name, func(t *testing.T) {
			runSemaphoreScenario(t, "PermitSemaphore: "+f.name, semOptions{permits: true}, f.args, f.fault)
		})
	}
}

// TestPermitSemaphoreNegativeControl: permits with a lease shorter than
// the work, held by workers that ignore their permit context: more than N
// hold at once, and the check must say so.
func TestPermitSemaphoreNegativeControl(t *testing.T) {
	runSemaphoreScenario(t, "PermitSemaphore: negative control (lease < work)",
		semOptions{permits: true, lease: 5 * time.Millisecond, work: 20 * time.Millisecond, ignoreLost: true, broken: true}, nil, nil)
}

// semOptions shape a scenario's workers.
type semOptions struct {
	permits    bool          // PermitSemaphore, else Semaphore
	lease      time.Duration // WithPermitLease; 0: watchdog
	work       time.Duration // time holding a permit; 0: 5ms
	ignoreLost bool          // keep holding after the permit context ends
	broken     bool          // violations are expected (negative control)
}

// TestSemaphoreChaos runs the counting semaphore under the faults that
// lose no reply. It has no restart run: its scripts are not idempotent, so
// a reply a restart lost is reported (ErrNoReply) rather than applied
// twice, but an acquire whose reply was lost leaks its permit, and the run
// would slowly starve (documented; use a PermitSemaphore).
func TestSemaphoreChaos(t *testing.T) {
	for _, f := range []struct {
		name  string
		fault semFault
	}{
		{"pub/sub connections killed", killPubSub},
		{"SCRIPT FLUSH loop", flushScripts},
	} {
		t.Run(f.name, func(t *testing.T) {
			runSemaphoreScenario(t, "Semaphore: "+f.name, semOptions{}, nil, f.fault)
		})
	}
}

// holder is what a worker does with one kind of semaphore.
type holder interface {
	// acquire takes a permit; the returned context ends when the permit
	// is lost (never, for a counting semaphore).
	acquire(ctx context.Context) (context.Context, error)
	release(ctx, held context.Context) error
}

type permitHolder struct{ s *dlock.PermitSemaphore }

func (h permitHolder) acquire(ctx context.Context) (context.Context, error) { return h.s.Acquire(ctx) }

// release retries until Redis answers: a permit whose release failed
// would otherwise go on being renewed.
func (h permitHolder) release(ctx, held context.Context) error {
	for {
		err := h.s.Release(held)
		if err == nil || errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrClosed) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type countingHolder struct{ s *dlock.Semaphore }

func (h countingHolder) acquire(ctx context.Context) (context.Context, error) {
	return ctx, h.s.Acquire(ctx, 1)
}

func (h countingHolder) release(ctx, _ context.Context) error { return h.s.Release(ctx, 1) }

func runSemaphoreScenario(t *testing.T, scenario string, o semOptions, args []string, fault semFault) {
	if o.work == 0 {
		o.work = 5 * time.Millisecond
	}
	srv := redistest.NewServer(t, args...)
	ctx := context.Background()
	name := "chaos:sem"
	var holders []holder
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := dlock.New(rdb, dlock.WithWatchdogTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if o.permits {
			var opts []dlock.PermitOption
			if o.lease > 0 {
				opts = append(opts, dlock.WithPermitLease(o.lease))
			}
			s, err := c.NewPermitSemaphore(name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			holders = append(holders, permitHolder{s})
			if len(holders) == 1 {
				if _, err := s.TrySetPermits(ctx, semPermits); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			s, err := c.NewSemaphore(name)
			if err != nil {
				t.Fatal(err)
			}
			holders = append(holders, countingHolder{s})
			if len(holders) == 1 {
				if _, err := s.TrySetPermits(ctx, semPermits); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	faultCtx, stopFault := context.WithCancel(ctx)
	faults := make(chan int, 1)
	if fault != nil {
		go func() { faults <- fault(faultCtx, srv) }()
	} else {
		faults <- 0
	}

	perWorker := scale(40, 2500)
	if o.broken {
		perWorker = scale(10, 50)
	}
	var (
		mu                  sync.Mutex
		holds               []span
		maxWait             time.Duration
		errs, lost, retries int
		wg                  sync.WaitGroup
	)
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := holders[w%len(holders)]
			for done := 0; done < perWorker; {
				start := time.Now()
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				held, err := h.acquire(wctx)
				cancel()
				if err != nil {
					mu.Lock()
					errs++
					if errs <= 3 {
						t.Logf("acquire: %v", err)
					}
					give := errs > 10000
					mu.Unlock()
					if give {
						t.Error("too many errors:", err)
						return
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				from := time.Now()
				var told time.Time
				var toldMu sync.Mutex
				stop := context.AfterFunc(held, func() { toldMu.Lock(); told = time.Now(); toldMu.Unlock() })
				pause(o.work)
				to := time.Now()
				stop()
				toldMu.Lock()
				if !told.IsZero() && told.Before(to) && !o.ignoreLost {
					to = told
				}
				toldMu.Unlock()
				err = h.release(ctx, held)
				mu.Lock()
				holds = append(holds, span{from, to})
				maxWait = max(maxWait, from.Sub(start))
				switch {
				case errors.Is(err, dlock.ErrNotHeld):
					lost++
				case err != nil:
					retries++
				}
				mu.Unlock()
				done++
				pause(500 * time.Microsecond)
			}
		}()
	}
	awaitGroup(t, &wg, time.Duration(scale(5, 120))*time.Minute, "the workers")
	stopFault()
	n := faultCount(t, faults)

	most, violations := overlaps(holds, semPermits)
	t.Logf("%d holds, at most %d at once (N = %d), %d violations, max wait %v, %d faults, %d acquire errors, %d lost at release, %d release errors",
		len(holds), most, semPermits, violations, maxWait.Round(time.Millisecond), n, errs, lost, retries)
	addRow(row{scenario: scenario, acquired: len(holds), violations: violations, maxWait: maxWait.Round(time.Millisecond).String(),
		faults: n, notes: fmt.Sprintf("N = %d, at most %d held at once", semPermits, most)})
	if o.broken {
		if violations == 0 {
			t.Fatalf("negative control: no violation found in %d holds (at most %d at once)", len(holds), most)
		}
		return
	}
	// Holders overlapping show the check had something to check; all N at
	// once is usual but depends on the machine's load.
	if most < 2 {
		t.Errorf("at most %d permit held at once: the workers did not contend", most)
	}
	if violations > 0 {
		t.Fatalf("%d times more than %d permits were held at once (at most %d)", violations, semPermits, most)
	}
	if fault != nil && n == 0 {
		t.Fatal("the fault never struck: the run tested nothing")
	}
}

type span struct{ from, to time.Time }

// overlaps returns the most spans open at one instant, and at how many
// span starts more than n were open.
func overlaps(spans []span, n int) (most, violations int) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.from, 1}, edge{s.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	cur := 0
	for _, e := range edges {
		cur += e.delta
		if e.delta > 0 && cur > n {
			violations++
		}
		most = max(most, cur)
	}
	return most, violations
}

// TestCountDownLatchChaos: rounds of a latch counted down by 12 workers on
// three Clients while their pub/sub connections are killed; every waiter
// must return in every round (the poll covers lost zero messages).
func TestCountDownLatchChaos(t *testing.T) {
	srv := redistest.NewServer(t)
	ctx := context.Background()
	var latches []*dlock.CountDownLatch
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		l, err := c.NewCountDownLatch("chaos:latch")
		if err != nil {
			t.Fatal(err)
		}
		latches = append(latches, l)
	}
	faultCtx, stopFault := context.WithCancel(ctx)
	faults := make(chan int, 1)
	go func() { faults <- killPubSub(faultCtx, srv) }()

	rounds := scale(30, 1000)
	var slowest time.Duration
	done := 0
	for ; done < rounds; done++ {
		if ok, err := latches[0].TrySetCount(ctx, 12); !ok || err != nil {
			t.Fatalf("TrySetCount: %v %v", ok, err)
		}
		var wg sync.WaitGroup
		waited := make(chan time.Duration, 6)
		for i := range 6 { // waiters
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := latches[i%3].Await(wctx); err != nil {
					t.Error(err)
				}
				waited <- time.Since(start)
			}()
		}
		for i := range 12 { // counters
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := latches[i%3].CountDown(ctx)
					if err == nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		awaitGroup(t, &wg, 2*time.Minute, fmt.Sprintf("round %d's waiters and counters", done))
		close(waited)
		for d := range waited {
			slowest = max(slowest, d)
		}
		if t.Failed() {
			break
		}
	}
	stopFault()
	n := faultCount(t, faults)
	t.Logf("%d rounds of 6 waiters and 12 count-downs, slowest wait %v, %d pub/sub kills", done, slowest.Round(time.Millisecond), n)
	addRow(row{scenario: "CountDownLatch: pub/sub connections killed", acquired: done * 6, maxWait: slowest.Round(time.Millisecond).String(),
		faults: n, notes: "awaits that returned"})
}

// faultCount receives the number of faults a stopped fault goroutine
// injected, failing t if it has not ended 30 s after it was stopped.
func faultCount(t *testing.T, faults <-chan int) int {
	t.Helper()
	select {
	case n := <-faults:
		return n
	case <-time.After(30 * time.Second):
		t.Fatal("the fault goroutine did not end within 30s of being stopped")
		return 0
	}
}
