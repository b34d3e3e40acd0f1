package main

// The many-waiters scenario checks Redisson's reason for RSpinLock: with
// huge lock counts on a cluster, one pub/sub subscription per lock channel
// is the bottleneck. Each of N waiters therefore waits on a lock of its
// own (N held locks, N channels), so a Mutex needs N subscriptions while a
// SpinLock needs none but polls instead. It runs on a small Redis Cluster
// (three masters, one replica each) and is not part of the default run:
// with 100 k waiters it takes minutes.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// manyConfig is the many-waiters scenario's parameters.
type manyConfig struct {
	waiters int // one lock each
	clients int // dlock Clients the waiters are spread over
	// settle bounds the wait for every waiter to park; window is the
	// measured time while parked; drain bounds the wait after the
	// releases.
	settle, window, drain time.Duration
	lease                 time.Duration // the holders' lease (no watchdog)
}

func defaultManyConfig() manyConfig {
	return manyConfig{waiters: 100000, clients: 4, settle: 60 * time.Second, window: 5 * time.Second,
		drain: 120 * time.Second, lease: 10 * time.Minute}
}

// manyLibs are the lock kinds compared: the Mutex (waiters subscribe to
// the lock's channel) and the SpinLock (waiters back off and poll).
var manyLibs = []manyLib{
	{"dlock", "`Mutex`: each waiter subscribed to its lock's channel (sharded pub/sub on the cluster)",
		func(c *dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return c.NewMutex(name, opts...)
		}},
	{"dlock-spin", "`SpinLock`: no pub/sub; each waiter polls, backoff 1 ms doubling to 128 ms",
		func(c *dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return c.NewSpinLock(name, opts...)
		}},
}

// manyLib is a lock kind of the many-waiters scenario.
type manyLib struct {
	id, settings string
	new          func(c *dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error)
}

// manyResult is one lock kind's run.
type manyResult struct {
	Lib             string
	Waiters, Parked int
	ParkTime        time.Duration // from the first waiter's start until all were parked (or settle)
	RedisCPU        time.Duration // summed over the masters, over Window
	ClientCPU       time.Duration
	Window          time.Duration
	ExecPerSec      float64 // commands the masters executed per second while parked
	RoundTripsPerS  float64 // the waiters' Clients' round trips per second while parked
	Channels        int     // pub/sub channels (classic + sharded) on the masters
	PubSubConns     int     // CLIENT LIST TYPE pubsub, over the masters
	BytesPerWaiter  float64
	GoroutinesPerW  float64
	Release         time.Duration // time to release all N locks
	Wake            summary       // per waiter: its lock's release until it held it
	Drained         int
	Drain           time.Duration // first release until the last waiter held its lock
	EarlyAcquired   int           // must be 0
	KeysAtBound     int           // keys on the masters when the drain bound ran out
	Errors          int
	FirstError      string
	// Errors by phase: taking the held locks, waiting (a Lock that
	// failed and was tried again, a waiter's Unlock, a waiter cancelled at
	// the drain bound) and releasing the held locks.
	HoldErrors, WaitErrors, ReleaseErrors int
	// Failed is why the run gave no result ("" when it did).
	Failed string
}

// manyErrors records a run's errors, keeping the first, and counts those
// of each phase.
type manyErrors struct {
	mu                      sync.Mutex
	n                       int
	first                   string
	hold, wait, releaseErrs int
}

func (e *manyErrors) add(phase *int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	*phase++
	if e.n++; e.first == "" {
		e.first = err.Error()
	}
}

// forEach runs f(i) for i in [0, n) on workers goroutines.
func forEach(n, workers int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// manyWorker holds j.Waiters locks on the cluster at j.Addrs with one
// Client, parks one waiter per lock on j.Clients other Clients, measures
// what parking costs, releases the locks and times each waiter's wake-up.
func manyWorker(j job) (*manyResult, error) {
	i := slices.IndexFunc(manyLibs, func(l manyLib) bool { return l.id == j.Lib })
	if i < 0 {
		return nil, fmt.Errorf("bench: many-waiters: unknown library %q", j.Lib)
	}
	newLock := manyLibs[i].new
	ctx := context.Background()
	masters, err := clusterMasters(ctx, j.Addrs)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, m := range masters {
			_ = m.Close()
		}
	}()
	holder, err := dlock.New(redis.NewClusterClient(&redis.ClusterOptions{Addrs: j.Addrs}))
	if err != nil {
		return nil, err
	}
	defer holder.Close()
	clients := make([]*dlock.Client, j.Clients)
	rts := make([]*counter, j.Clients)
	for k := range clients {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: j.Addrs})
		rts[k] = &counter{}
		rdb.AddHook(rts[k])
		if clients[k], err = dlock.New(rdb); err != nil {
			return nil, err
		}
		defer clients[k].Close()
	}

	r := &manyResult{Lib: j.Lib, Waiters: j.Waiters, Window: j.Window}
	var errs manyErrors
	n := j.Waiters
	name := func(i int) string { return "bench:many:" + strconv.Itoa(i) }

	// Hold every lock, with a lease so that no watchdog runs.
	holds := make([]dlock.Locker, n)
	holdCtx := make([]context.Context, n)
	forEach(n, 256, func(i int) {
		l, err := newLock(holder, name(i), dlock.WithLease(j.Hold))
		if err == nil {
			holdCtx[i], err = l.Lock(ctx)
		}
		if err != nil {
			errs.add(&errs.hold, fmt.Errorf("hold: %w", err))
			return
		}
		holds[i] = l
	})

	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()

	// Park the waiters.
	released := make([]atomic.Int64, n) // monoNow before its lock's Unlock
	acquired := make([]int64, n)
	var early atomic.Int64
	var done atomic.Int64
	waitCtx, cancel := context.WithTimeout(ctx, j.Settle+j.Window+j.Settle2+time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	parkStart := monoNow()
	for i := range n {
		wg.Go(func() {
			l, err := newLock(clients[i%len(clients)], name(i))
			if err != nil {
				errs.add(&errs.wait, err)
				return
			}
			// As an application would, a waiter whose Lock fails (an
			// attempt timed out, a subscription could not be made) tries
			// again, after a pause that keeps a failing dial from spinning.
			var lockCtx context.Context
			for {
				if lockCtx, err = l.Lock(waitCtx); err == nil {
					break
				}
				errs.add(&errs.wait, fmt.Errorf("wait: %w", err))
				if waitCtx.Err() != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			acquired[i] = monoNow()
			if released[i].Load() == 0 {
				early.Add(1)
			}
			if err := l.Unlock(lockCtx); err != nil {
				errs.add(&errs.wait, fmt.Errorf("waiter unlock: %w", err))
			}
			done.Add(1)
		})
	}
	if r.Parked, err = awaitParked(ctx, j, masters, rts, n, parkStart); err != nil {
		return nil, err
	}
	r.ParkTime = time.Duration(monoNow() - parkStart)

	// Measure while parked.
	s0, err := sampleServers(ctx, masters)
	if err != nil {
		return nil, err
	}
	cpu0, rt0 := cpuTime(), sumCounters(rts)
	time.Sleep(j.Window)
	cpu1, rt1 := cpuTime(), sumCounters(rts)
	s1, err := sampleServers(ctx, masters)
	if err != nil {
		return nil, err
	}
	d := s1.delta(s0)
	r.RedisCPU, r.ClientCPU = d.cpu, cpu1-cpu0
	r.ExecPerSec = float64(d.total) / j.Window.Seconds()
	r.RoundTripsPerS = float64(rt1-rt0) / j.Window.Seconds()
	if r.Channels, r.PubSubConns, err = pubsubCounts(ctx, masters); err != nil {
		return nil, err
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	mem := func(m *runtime.MemStats) float64 { return float64(m.HeapAlloc + m.StackInuse) }
	r.BytesPerWaiter = (mem(&ms1) - mem(&ms0)) / float64(n)
	r.GoroutinesPerW = float64(runtime.NumGoroutine()-g0) / float64(n)

	// Release every lock and wait for every waiter to have held its own.
	start := monoNow()
	forEach(n, 64, func(i int) {
		if holds[i] == nil {
			return
		}
		released[i].Store(monoNow())
		if err := holds[i].Unlock(holdCtx[i]); err != nil {
			errs.add(&errs.releaseErrs, fmt.Errorf("release: %w", err))
		}
	})
	r.Release = time.Duration(monoNow() - start)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(j.Settle2):
		// Are the waiters left behind waiting on free locks?
		for _, m := range masters {
			n, err := m.DBSize(ctx).Result()
			if err != nil {
				return nil, fmt.Errorf("bench: DBSIZE: %w", err)
			}
			r.KeysAtBound += int(n)
		}
		cancel()
		<-drained
	}
	r.Drained = int(done.Load())
	r.EarlyAcquired = int(early.Load())
	var wakes []int64
	var last int64
	for i := range n {
		if acquired[i] != 0 && released[i].Load() != 0 {
			wakes = append(wakes, acquired[i]-released[i].Load())
			last = max(last, acquired[i])
		}
	}
	r.Wake = summarize(wakes)
	if last > 0 {
		r.Drain = time.Duration(last - start)
	}
	r.Errors, r.FirstError = errs.n, errs.first
	r.HoldErrors, r.WaitErrors, r.ReleaseErrors = errs.hold, errs.wait, errs.releaseErrs
	return r, nil
}

// awaitParked waits until every waiter is parked: for the Mutex, until the
// masters have n channels; for the SpinLock, until the waiters' Clients
// have sent at least 2n round trips (every waiter has tried at least once
// and is backing off), then one more second for the backoff to grow. It
// gives up after j.Settle and returns how many it saw parked.
func awaitParked(ctx context.Context, j job, masters []*redis.Client, rts []*counter, n int, since int64) (int, error) {
	deadline := since + int64(j.Settle)
	for {
		var parked int
		if j.Lib == "dlock" {
			ch, _, err := pubsubCounts(ctx, masters)
			if err != nil {
				return 0, err
			}
			parked = ch
		} else {
			parked = min(n, int(sumCounters(rts)/2))
		}
		if parked >= n || monoNow() > deadline {
			if j.Lib != "dlock" {
				time.Sleep(time.Second)
			}
			return parked, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// clusterMasters returns a client on every master of the cluster seeded
// with addrs (CLUSTER SHARDS' view through go-redis).
func clusterMasters(ctx context.Context, addrs []string) ([]*redis.Client, error) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	var mu sync.Mutex
	var ms []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		ms = append(ms, c.Options().Addr)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: cluster masters: %w", err)
	}
	slices.Sort(ms)
	out := make([]*redis.Client, len(ms))
	for i, a := range ms {
		out[i] = redis.NewClient(&redis.Options{Addr: a})
	}
	return out, nil
}

// pubsubCounts returns the pub/sub channels (INFO stats pubsub_channels
// plus pubsubshard_channels) and pub/sub connections summed over masters.
func pubsubCounts(ctx context.Context, masters []*redis.Client) (channels, conns int, err error) {
	for _, m := range masters {
		info, err := m.Info(ctx, "stats").Result()
		if err != nil {
			return 0, 0, fmt.Errorf("bench: INFO stats: %w", err)
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "pubsub_channels" || k == "pubsubshard_channels" {
				c, _ := strconv.Atoi(v)
				channels += c
			}
		}
		ps, _, err := connections(ctx, m)
		if err != nil {
			return 0, 0, err
		}
		conns += ps
	}
	return channels, conns, nil
}

// runMany runs the many-waiters scenario for one lock kind on a fresh
// cluster.
func runMany(cfg config, id string) (*manyResult, error) {
	c, err := redistest.StartCluster()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := cfg.many
	j := job{Mode: "many", Lib: id, Addrs: c.Addrs(), Waiters: m.waiters, Clients: m.clients,
		Settle: m.settle, Window: m.window, Settle2: m.drain, Hold: m.lease}
	r := &manyResult{}
	if err := runJobs(cfg.hang, []job{j}, []any{r}); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *report) runManys() {
	for _, l := range manyLibs {
		if r.cfg.libIDs != nil && !slices.Contains(r.cfg.libIDs, l.id) {
			continue
		}
		progress("many waiters %-15s %d waiters, one lock each, cluster of 3 masters", l.id, r.cfg.many.waiters)
		res, err := runMany(r.cfg, l.id)
		if err != nil {
			res = &manyResult{Lib: l.id, Waiters: r.cfg.many.waiters, Failed: failed(err)}
		}
		r.many = append(r.many, res)
	}
}

func (r *report) writeMany(w writer) {
	if len(r.many) == 0 {
		return
	}
	m := r.cfg.many
	w("## Many waiters on a cluster: SpinLock vs pub/sub\n\n")
	w("Redis Cluster of 3 masters + 3 replicas; %d locks held by one Client (lease %v), one waiter goroutine per lock spread over %d other Clients in the same process; "+
		"measured over %v once all waiters are parked (CPU and commands summed over the masters); then every lock is released (64 at a time) and each waiter's wake-up is timed from its own lock's release until it holds it.\n\n",
		m.waiters, m.lease, m.clients, m.window)
	t := newTable("library", "configuration")
	for _, l := range manyLibs {
		t.row(l.id, l.settings)
	}
	w("%s\n", t)
	t = newTable("library", "parked", "time to park", "Redis CPU", "executed/s", "round trips/s", "client CPU",
		"channels", "pub/sub conns", "bytes/waiter", "goroutines/waiter", "release all", "wake p50", "wake p99", "wake max", "drain", "early", "errors hold/wait/release")
	for _, x := range r.many {
		if x.Failed != "" {
			t.noResult(libCell(x.Lib, x.Failed, x.Errors, x.FirstError))
			continue
		}
		drain := x.Drain.Round(time.Millisecond).String()
		if x.Drained < x.Waiters {
			drain = fmt.Sprintf("%d/%d in %v (%d keys left then)", x.Drained, x.Waiters, m.drain, x.KeysAtBound)
		}
		t.row(x.Lib+errNote(x.Errors, x.FirstError), fmt.Sprintf("%d/%d", x.Parked, x.Waiters), x.ParkTime.Round(time.Millisecond).String(),
			pct(x.RedisCPU, x.Window), fmtRate(x.ExecPerSec), fmtRate(x.RoundTripsPerS), pct(x.ClientCPU, x.Window),
			fmt.Sprint(x.Channels), fmt.Sprint(x.PubSubConns), fmt.Sprintf("%.0f", x.BytesPerWaiter), f2(x.GoroutinesPerW),
			x.Release.Round(time.Millisecond).String(), fmtDur(x.Wake.P50), fmtDur(x.Wake.P99), fmtDur(x.Wake.Max), drain, fmt.Sprint(x.EarlyAcquired),
			fmt.Sprintf("%d/%d/%d", x.HoldErrors, x.WaitErrors, x.ReleaseErrors))
	}
	w("%s\n", t)
}
