package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// The permit semaphore scenario ("sem"): dlock's PermitSemaphore against
// what a Go user writes without it to cap concurrency with leases that
// survive a crash: a Lua script over a sorted set of leased slots, polled,
// or a redsync Mutex per slot, polled. Two measurements per library, each
// in a fresh worker process against a fresh redis-server:
//
//   - throughput: semClients Clients × semPerClient goroutines take a
//     permit of semPermits, hold it semHold (asleep, or busy with -sem-busy),
//     give it back, think (-sem-think, default 2 ms as in the hot-lock
//     scenario: the project's benchmarks model work with think time
//     between acquisitions), again. The ceiling is permits / measured
//     hold mean: no library can exceed it, and with no think time
//     (-sem-think 0) a poller whose releasing goroutine takes its own
//     permit back at once comes closest (it never hands over);
//   - wake-up: one permit; a holder on one Client gives it back while a
//     waiter on another Client waits; the time from the release call to
//     the waiter's acquisition, over semSamples samples (the release comes
//     20-30 ms after the waiter started waiting, at a random point of a
//     poller's 10 ms cycle).

// semConfig is the scenario's part of config.
type semConfig struct {
	libs               []semLib
	permits            int
	clients, perClient int
	hold, warm, window time.Duration
	// think is the sleep between giving a permit back and asking for the
	// next (0: none); busy makes the hold CPU-bound work (bench/hot.go's
	// calibrated busy loop) instead of a sleep.
	think                   time.Duration
	busy                    bool
	samples                 int
	pollEvery, wakeupSettle time.Duration
}

func defaultSemConfig() semConfig {
	return semConfig{
		libs: semLibs, permits: 4, clients: 4, perClient: 4,
		hold: time.Millisecond, think: 2 * time.Millisecond, warm: time.Second, window: 4 * time.Second,
		samples: 200, pollEvery: 10 * time.Millisecond, wakeupSettle: 20 * time.Millisecond,
	}
}

// quick shortens the scenario for a check that it runs.
func (c *semConfig) quick() { c.warm, c.window, c.samples = 300*time.Millisecond, time.Second, 20 }

// semaphore is what every contender is measured on: wait for a permit and
// later give it back.
type semaphore interface {
	acquire(ctx context.Context) (release func(context.Context) error, err error)
}

// semLib is one way to cap concurrency, as a user would set it up.
type semLib struct {
	id, settings string
	// open returns the semaphore name of permits permits on rdb (one
	// connection pool: one Client); closing rdb ends it.
	open func(rdb *redis.Client, name string, permits int, poll time.Duration) (semaphore, func(), error)
}

var semLibs = []semLib{
	{
		id:       "dlock",
		settings: "`PermitSemaphore`, watchdog lease (30 s, renewed), pub/sub wake-up",
		open: func(rdb *redis.Client, name string, permits int, _ time.Duration) (semaphore, func(), error) {
			c, err := dlock.New(rdb)
			if err != nil {
				return nil, nil, err
			}
			s, err := c.NewPermitSemaphore(name)
			if err == nil {
				_, err = s.TrySetPermits(context.Background(), permits)
			}
			if err != nil {
				_ = c.Close()
				return nil, nil, err
			}
			return dlockSem{s}, func() { _ = c.Close() }, nil
		},
	},
	{
		id:       "lua-zset-poll",
		settings: "a Lua script over a sorted set of leased slots (drop expired, ZCARD < N: ZADD id, lease 30 s, not renewed), polled every 10 ms; release ZREM",
		open: func(rdb *redis.Client, name string, permits int, poll time.Duration) (semaphore, func(), error) {
			return &luaSem{rdb: rdb, key: name, permits: permits, poll: poll}, func() {}, nil
		},
	},
	{
		id:       "redsync-slots",
		settings: "a redsync Mutex per permit (N keys, expiry 30 s): TryLock each from a random one, all taken: sleep 10 ms",
		open: func(rdb *redis.Client, name string, permits int, poll time.Duration) (semaphore, func(), error) {
			return &slotSem{rs: redsync.New(goredis.NewPool(rdb)), name: name, permits: permits, poll: poll}, func() {}, nil
		},
	},
}

func semLibByID(id string) (semLib, error) {
	for _, l := range semLibs {
		if l.id == id {
			return l, nil
		}
	}
	return semLib{}, fmt.Errorf("bench: unknown semaphore library %q", id)
}

// dlock

type dlockSem struct{ s *dlock.PermitSemaphore }

func (d dlockSem) acquire(ctx context.Context) (func(context.Context) error, error) {
	p, err := d.s.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { return d.s.Release(p) }, nil
}

// A Lua counter of leased slots, polled.

// luaAcquire takes a slot: KEYS[1] the sorted set of slots held (id ->
// expiry ms); ARGV now ms, lease ms, id, permits. 1 when taken.
var luaAcquire = redis.NewScript(`
redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[1])
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('zadd', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), ARGV[3])
  return 1
end
return 0`)

type luaSem struct {
	rdb     *redis.Client
	key     string
	permits int
	poll    time.Duration
	ids     atomic.Int64
}

func (l *luaSem) acquire(ctx context.Context) (func(context.Context) error, error) {
	id := strconv.FormatInt(rand.Int64(), 36) + ":" + strconv.FormatInt(l.ids.Add(1), 10)
	for {
		ok, err := luaAcquire.Run(ctx, l.rdb, []string{l.key}, time.Now().UnixMilli(), peerTTL.Milliseconds(), id, l.permits).Int()
		if err != nil {
			return nil, err
		}
		if ok == 1 {
			return func(ctx context.Context) error { return l.rdb.ZRem(ctx, l.key, id).Err() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.poll):
		}
	}
}

// A redsync Mutex per slot, polled.

type slotSem struct {
	rs      *redsync.Redsync
	name    string
	permits int
	poll    time.Duration
}

func (s *slotSem) acquire(ctx context.Context) (func(context.Context) error, error) {
	for {
		first := rand.IntN(s.permits)
		for k := range s.permits {
			m := s.rs.NewMutex(fmt.Sprintf("%s:%d", s.name, (first+k)%s.permits), redsync.WithTries(1), redsync.WithExpiry(peerTTL))
			if err := m.TryLockContext(ctx); err == nil {
				return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// semResult is one library's two measurements.
type semResult struct {
	Lib string
	// Throughput.
	Permits, Goroutines int
	Acq                 int64   // acquisitions in the window
	PerSec              float64 // acquisitions per second
	Wait                summary // time in acquire, ns
	HoldMean            int64   // mean time from acquire returning to the release call, ns
	Ceiling             float64 // Permits / HoldMean, acquisitions per second
	MaxHeld             int     // most permits held at once, as the holders saw it: at most Permits
	RoundTrips          float64 // per acquisition, go-redis hook
	Executed            float64 // commands the server executed per acquisition
	RedisCPU, ClientCPU time.Duration
	Window              time.Duration
	// Wake-up.
	Wakeup     summary // from the release call to the waiter's acquisition, ns
	Errors     int
	FirstError string
	Left       footprint
	// Failed is why the run gave no result ("" when it did).
	Failed string
}

// semWorker runs both measurements for one library.
func semWorker(j job, l semLib) (*semResult, error) {
	ctx := context.Background()
	r := &semResult{Lib: l.id, Permits: j.Permits, Goroutines: j.Clients * j.Goroutines, Window: j.Window}
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if r.Errors++; r.FirstError == "" {
			r.FirstError = err.Error()
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: j.Addr})
	defer admin.Close()

	// Throughput.
	var rts []*counter
	sems := make([]semaphore, j.Clients)
	for i := range sems {
		rdb, rt := newRDB(j.Addr)
		defer rdb.Close()
		s, closeSem, err := l.open(rdb, "bench:sem", j.Permits, j.Poll)
		if err != nil {
			return nil, err
		}
		defer closeSem()
		sems[i], rts = s, append(rts, rt)
	}
	var measuring, stop atomic.Bool
	var held, maxHeld atomic.Int64
	var mu sync.Mutex
	var waits []int64
	var heldNs atomic.Int64 // hold time summed over the window's acquisitions
	b := burner{perIter: j.PerIter}
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range j.Clients * j.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			for !stop.Load() {
				start := time.Now()
				release, err := sems[i%j.Clients].acquire(runCtx)
				if err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					break
				}
				wait := time.Since(start)
				n := held.Add(1)
				for m := maxHeld.Load(); n > m && !maxHeld.CompareAndSwap(m, n); m = maxHeld.Load() {
				}
				if measuring.Load() {
					mine = append(mine, int64(wait))
				}
				t := time.Now()
				if j.Work > 0 {
					b.burn(j.Work)
				} else {
					time.Sleep(j.Hold)
				}
				held.Add(-1)
				if measuring.Load() {
					heldNs.Add(int64(time.Since(t)))
				}
				if err := release(ctx); err != nil {
					fail(err)
				}
				if j.Think > 0 {
					time.Sleep(j.Think)
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(j.Settle)
	s0, err := sampleServer(ctx, admin)
	if err != nil {
		return nil, err
	}
	cpu0, rt0 := cpuTime(), sumCounters(rts)
	measuring.Store(true)
	time.Sleep(j.Window)
	measuring.Store(false)
	cpu1, rt1 := cpuTime(), sumCounters(rts)
	s1, err := sampleServer(ctx, admin)
	if err != nil {
		return nil, err
	}
	stop.Store(true)
	wg.Wait()
	r.Acq = int64(len(waits))
	r.PerSec = float64(r.Acq) / j.Window.Seconds()
	r.Wait = summarize(waits)
	if r.Acq > 0 {
		r.HoldMean = heldNs.Load() / r.Acq
		r.Ceiling = float64(j.Permits) / time.Duration(r.HoldMean).Seconds()
	}
	r.MaxHeld = int(maxHeld.Load())
	d := s1.delta(s0)
	if r.Acq > 0 {
		r.RoundTrips = float64(rt1-rt0) / float64(r.Acq)
		r.Executed = float64(d.total) / float64(r.Acq)
	}
	r.RedisCPU, r.ClientCPU = d.cpu, cpu1-cpu0

	// Wake-up: one permit, holder and waiter on their own Clients.
	var closers []func()
	defer func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}()
	open := func() (semaphore, error) {
		rdb := redis.NewClient(&redis.Options{Addr: j.Addr})
		s, closeSem, err := l.open(rdb, "bench:sem:wakeup", 1, j.Poll)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		closers = append(closers, func() { _ = rdb.Close() }, closeSem)
		return s, nil
	}
	holder, err := open()
	if err != nil {
		return nil, err
	}
	waiter, err := open()
	if err != nil {
		return nil, err
	}
	var wakeups []int64
	for range j.Samples {
		release, err := holder.acquire(ctx)
		if err != nil {
			fail(err)
			break
		}
		got := make(chan error, 1)
		var acquired time.Time
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			rel, err := waiter.acquire(wctx)
			acquired = time.Now()
			if err == nil {
				err = rel(ctx)
			}
			got <- err
		}()
		time.Sleep(j.Settle2 + rand.N(j.Poll))
		released := time.Now()
		if err := release(ctx); err != nil {
			fail(err)
		}
		if err := <-got; err != nil {
			fail(err)
			continue
		}
		wakeups = append(wakeups, int64(acquired.Sub(released)))
	}
	r.Wakeup = summarize(wakeups)
	return r, nil
}

// runSem runs the scenario for one library in a worker process against a
// fresh redis-server.
func runSem(cfg config, l semLib) (*semResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	c := cfg.sem
	j := job{Mode: "sem", Lib: l.id, Addr: srv.Addr(), Clients: c.clients, Goroutines: c.perClient,
		Permits: c.permits, Hold: c.hold, Think: c.think, Samples: c.samples, Poll: c.pollEvery, Settle2: c.wakeupSettle,
		Settle: c.warm, Window: c.window}
	if c.busy {
		j.Work, j.PerIter = c.hold, cfg.burner.perIter
	}
	r := &semResult{}
	left, err := runOn(cfg.hang, []string{srv.Addr()}, []job{j}, []any{r})
	if err != nil {
		return nil, err
	}
	r.Left = left
	return r, nil
}

func (r *report) runSems() {
	for _, l := range r.cfg.sem.libs {
		progress("semaphore    %-15s %d permits, %d goroutines; wake-up ×%d", l.id, r.cfg.sem.permits, r.cfg.sem.clients*r.cfg.sem.perClient, r.cfg.sem.samples)
		res, err := runSem(r.cfg, l)
		if err != nil {
			res = &semResult{Lib: l.id, Failed: failed(err)}
		}
		r.sem = append(r.sem, res)
	}
}

func (r *report) writeSem(w writer) {
	if len(r.sem) == 0 {
		return
	}
	c := r.cfg.sem
	w("## Permit semaphore\n\n")
	t := newTable("library", "configuration")
	for _, l := range c.libs {
		t.row(l.id, l.settings)
	}
	w("%s\n", t)
	how := "asleep"
	if c.busy {
		how = "CPU-bound"
	}
	think := "again at once"
	if c.think > 0 {
		think = fmt.Sprintf("sleeps %v, again", c.think)
	}
	w("**Throughput.** %d permits; %d goroutines = %d connection pools × %d; each takes a permit, holds it %v (%s), gives it back, %s; window %v after %v warm-up. Hold: the measured mean; ceiling: permits / hold, the most any library can do. Max held: the most permits held at once as the holders saw it (at most %d).\n\n",
		c.permits, c.clients*c.perClient, c.clients, c.perClient, c.hold, how, think, c.window, c.warm, c.permits)
	t = newTable("library", "acquisitions/s", "of ceiling", "hold", "wait p50", "wait p99", "wait max", "max held", "round trips/acq", "executed/acq",
		"Redis CPU/acq", "client CPU/acq", "keys left", "memory left")
	for _, x := range r.sem {
		if x.Failed != "" {
			t.noResult(libCell(x.Lib, x.Failed, x.Errors, x.FirstError))
			continue
		}
		acq := float64(x.Acq)
		t.row(x.Lib+errNote(x.Errors, x.FirstError), fmtRate(x.PerSec), ofCeiling(x), fmtDur(x.HoldMean), fmtDur(x.Wait.P50), fmtDur(x.Wait.P99), fmtDur(x.Wait.Max),
			fmt.Sprint(x.MaxHeld), f2(x.RoundTrips), f2(x.Executed), perOp(x.RedisCPU, acq), perOp(x.ClientCPU, acq),
			fmt.Sprint(x.Left.Keys()), fmtBytes(x.Left.Mem()))
	}
	w("%s\n", t)
	w("**Wake-up latency.** One permit, held on one connection pool while a waiter on another waits; released %v plus a random 0–%v after the waiter started; the time from the release call to the waiter's acquisition, %d samples.\n\n",
		c.wakeupSettle, c.pollEvery, c.samples)
	t = newTable("library", "samples", "p50", "p99", "max", "mean")
	for _, x := range r.sem {
		if x.Failed != "" {
			t.noResult(libCell(x.Lib, x.Failed, x.Errors, x.FirstError))
			continue
		}
		t.row(x.Lib+errNote(x.Errors, x.FirstError), fmt.Sprint(x.Wakeup.N), fmtDur(x.Wakeup.P50), fmtDur(x.Wakeup.P99), fmtDur(x.Wakeup.Max), fmtDur(x.Wakeup.Mean))
	}
	w("%s\n", t)
}

// ofCeiling is x's throughput as a share of its ceiling (permits / hold).
func ofCeiling(x *semResult) string {
	if x.Ceiling <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %% of %s", 100*x.PerSec/x.Ceiling, fmtRate(x.Ceiling))
}
