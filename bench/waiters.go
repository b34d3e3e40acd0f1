package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// drainTimeout bounds the drain phase of the waiter-scale scenario.
const drainTimeout = 15 * time.Second

// waitersResult is one library with j.Waiters goroutines waiting on
// j.Locks held locks.
type waitersResult struct {
	Lib            string
	Locks, Waiters int
	EarlyAcquired  int // waiters that got a lock while it was held: must be 0
	PubSubConns    int // CLIENT LIST TYPE pubsub
	Conns          int // INFO clients connected_clients
	BytesPerWaiter float64
	GoroutinesPerW float64
	ClientPerSec   float64 // round trips per second while waiting (client hook)
	TotalPerSec    float64 // commands the server executed per second
	ClientCPU      time.Duration
	RedisCPU       time.Duration
	Window         time.Duration
	Drain          time.Duration // from releasing the locks until every waiter had its turn
	Drained        int
	Errors         int
	FirstError     string
	Left           footprint
	// Failed is why the run gave no result ("" when it did).
	Failed string
}

// waitersWorker holds j.Locks locks, starts j.Waiters goroutines that wait
// for them (j.Waiters/j.Locks per lock), measures what waiting costs, then
// releases the locks and times how long it takes every waiter to get its
// lock once.
func waitersWorker(j job, l lib) (*waitersResult, error) {
	lk, err := l.open(j.Addr, 0)
	if err != nil {
		return nil, err
	}
	defer closeLocker(lk)
	admin := redis.NewClient(&redis.Options{Addr: j.Addr})
	defer admin.Close()
	ctx := context.Background()

	r := &waitersResult{Lib: l.id, Locks: j.Locks, Waiters: j.Waiters, Window: j.Window}
	names := make([]string, j.Locks)
	for i := range names {
		names[i] = fmt.Sprintf("bench:w:%d", i)
	}
	holds, errs, first := lockAll(ctx, lk, names, 32)
	r.Errors, r.FirstError = errs, first

	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()

	var released atomic.Bool
	var early, done atomic.Int64
	var lastDone atomic.Int64
	var errMu sync.Mutex
	// Polling peers give up at the ctx deadline (bsm/redislock: its TTL
	// without one), so the deadline covers the whole run.
	waitCtx, cancel := context.WithTimeout(ctx, j.Settle+j.Window+drainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i := range j.Waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				unlock, err := lk.lock(waitCtx, names[i%len(names)])
				if err != nil {
					if waitCtx.Err() != nil {
						return
					}
					errMu.Lock()
					if r.Errors++; r.FirstError == "" {
						r.FirstError = err.Error()
					}
					errMu.Unlock()
					continue
				}
				if !released.Load() {
					early.Add(1)
				}
				_ = unlock(ctx)
				done.Add(1)
				lastDone.Store(monoNow())
				return
			}
		}()
	}

	st, err := measureSteady(ctx, admin, lk, j.Settle, j.Window)
	if err != nil {
		return nil, err
	}
	r.ClientPerSec = float64(st.roundTrips) / j.Window.Seconds()
	r.TotalPerSec = float64(st.server.total) / j.Window.Seconds()
	r.ClientCPU, r.RedisCPU = st.clientCPU, st.server.cpu
	if r.PubSubConns, r.Conns, err = connections(ctx, admin); err != nil {
		return nil, err
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	g1 := runtime.NumGoroutine()
	mem := func(m *runtime.MemStats) float64 { return float64(m.HeapAlloc + m.StackInuse) }
	r.BytesPerWaiter = (mem(&ms1) - mem(&ms0)) / float64(j.Waiters)
	r.GoroutinesPerW = float64(g1-g0) / float64(j.Waiters)

	released.Store(true)
	start := monoNow()
	if n, first := unlockAll(ctx, holds); n > 0 {
		r.Errors += n
		if r.FirstError == "" {
			r.FirstError = first
		}
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-waitCtx.Done():
	}
	r.EarlyAcquired = int(early.Load())
	r.Drained = int(done.Load())
	r.Drain = time.Duration(lastDone.Load() - start)
	return r, nil
}

// runWaiters runs the waiter-scale scenario for one library.
func runWaiters(cfg config, l lib) (*waitersResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	j := job{Mode: "waiters", Lib: l.id, Addr: srv.Addr(), Locks: cfg.waitLocks, Waiters: cfg.waiters,
		Settle: cfg.waitSettle, Window: cfg.waitWindow}
	r := &waitersResult{}
	left, err := runOn(cfg.hang, []string{srv.Addr()}, []job{j}, []any{r})
	if err != nil {
		return nil, err
	}
	r.Left = left
	return r, nil
}
