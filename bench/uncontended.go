package main

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// opTimeout bounds one uncontended Lock, so that a library that fails to
// take a free lock shows as errors instead of hanging the run.
const opTimeout = 5 * time.Second

// uncontendedWorkerResult is one uncontended run.
type uncontendedWorkerResult struct {
	Latencies   []int64 // of the Lock+Unlock pairs completed in the window (ns)
	RoundTrips  int64   // counted by the client's hook in the window
	Subscribes  int64   // pub/sub (un)subscriptions in the window
	Total       int64   // commands the servers executed, script-internal included
	RedisCPU    time.Duration
	ClientCPU   time.Duration
	Errors      int
	FirstError  string
	WindowNanos int64
	Goroutines  int
}

// uncontendedWorker runs j.Goroutines goroutines, each locking and
// unlocking its own key as fast as it can.
func uncontendedWorker(j job, l lib) (*uncontendedWorkerResult, error) {
	lk, err := l.open(j.Addr, 0)
	if err != nil {
		return nil, err
	}
	defer closeLocker(lk)
	return lockLoop(j, lk, []string{j.Addr})
}

// lockLoop is the uncontended measurement: j.Goroutines goroutines lock
// and unlock their own keys with lk from j.Begin to j.T1, and the window
// [j.T0, j.T1) is measured. The servers at addrs are sampled at both ends
// and their counters added up.
func lockLoop(j job, lk locker, addrs []string) (*uncontendedWorkerResult, error) {
	admins := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		admins[i] = redis.NewClient(&redis.Options{Addr: a})
		defer admins[i].Close()
	}

	var s0, s1 serverStats
	var cpu0, cpu1 time.Duration
	var rt0, rt1 int64
	var sErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sleepUntil(j.T0)
		cpu0, rt0 = cpuTime(), lk.roundTrips()
		s0, sErr = sampleServers(context.Background(), admins)
		sleepUntil(j.T1)
		cpu1, rt1 = cpuTime(), lk.roundTrips()
		if sErr == nil {
			s1, sErr = sampleServers(context.Background(), admins)
		}
	}()

	res := &uncontendedWorkerResult{WindowNanos: j.T1 - j.T0, Goroutines: j.Goroutines}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sleepUntil(j.Begin)
	for g := range j.Goroutines {
		wg.Go(func() {
			ctx := context.Background()
			key := fmt.Sprintf("bench:u:%d", g)
			var lat []int64
			errs, first := 0, ""
			for {
				start := monoNow()
				if start >= j.T1 {
					break
				}
				cctx, cancel := context.WithTimeout(ctx, opTimeout)
				unlock, err := lk.lock(cctx, key)
				if err == nil {
					err = unlock(ctx)
				}
				cancel()
				end := monoNow()
				if err != nil {
					if errs++; first == "" {
						first = err.Error()
					}
					continue
				}
				if start >= j.T0 && end < j.T1 {
					lat = append(lat, end-start)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Latencies = append(res.Latencies, lat...)
			res.Errors += errs
			if res.FirstError == "" {
				res.FirstError = first
			}
		})
	}
	wg.Wait()
	<-sampled
	if sErr != nil {
		return nil, sErr
	}
	d := s1.delta(s0)
	res.RoundTrips, res.Subscribes, res.Total, res.RedisCPU = rt1-rt0, d.subscribes, d.total, d.cpu
	res.ClientCPU = cpu1 - cpu0
	return res, nil
}

// uncontendedResult is the best of a library's rounds at one concurrency.
type uncontendedResult struct {
	Lib        string
	Goroutines int
	PerSec     float64
	Latency    summary
	// Per Lock+Unlock.
	RoundTrips, Subscribes, Executed float64
	RedisCPU, ClientCPU              time.Duration // in the window
	Window                           time.Duration
	Left                             footprint
	Errors                           int
	FirstError                       string
	Rounds                           []float64 // throughput of every round
	// Failed is why the run, or one of the rounds kept in this row, gave
	// no result ("" when every one did).
	Failed string
}

// ops is the number of Lock+Unlock pairs in the window.
func (u *uncontendedResult) ops() float64 { return u.PerSec * u.Window.Seconds() }

// runUncontended measures one library at one concurrency in one worker
// process on a fresh redis-server.
func runUncontended(cfg config, l lib, goroutines, round int) (*uncontendedResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	begin := monoNow() + int64(cfg.spawn)
	t0 := begin + int64(cfg.warm)
	j := job{Mode: "uncontended", Lib: l.id, Addr: srv.Addr(), Goroutines: goroutines,
		Begin: begin, T0: t0, T1: t0 + int64(cfg.uncWindow)}
	if cfg.profileDir != "" {
		j.Profile = filepath.Join(cfg.profileDir, fmt.Sprintf("uncontended-%s-%d-%d.pprof", l.id, goroutines, round))
	}
	w := &uncontendedWorkerResult{}
	left, err := runOn(cfg.hang, []string{srv.Addr()}, []job{j}, []any{w})
	if err != nil {
		return nil, err
	}
	return w.result(l.id, left), nil
}

// result summarizes a worker's run of library lib.
func (w *uncontendedWorkerResult) result(lib string, left footprint) *uncontendedResult {
	win := time.Duration(w.WindowNanos)
	ops := len(w.Latencies)
	r := &uncontendedResult{
		Lib: lib, Goroutines: w.Goroutines,
		PerSec:   float64(ops) / win.Seconds(),
		Latency:  summarize(w.Latencies),
		RedisCPU: w.RedisCPU, ClientCPU: w.ClientCPU, Window: win, Left: left,
		Errors: w.Errors, FirstError: w.FirstError,
	}
	if ops > 0 {
		r.RoundTrips = float64(w.RoundTrips) / float64(ops)
		r.Subscribes = float64(w.Subscribes) / float64(ops)
		r.Executed = float64(w.Total) / float64(ops)
	}
	return r
}

// keepBest merges a new round into the best so far of its cell: the
// round with the highest throughput is kept, every round's throughput is
// listed, and the first failure of any is noted.
func keepBest(best, res *uncontendedResult) *uncontendedResult {
	if best == nil {
		res.Rounds = []float64{res.PerSec}
		return res
	}
	res.Rounds = append(best.Rounds, res.PerSec)
	failed := cmp.Or(best.Failed, res.Failed)
	if best.PerSec > res.PerSec {
		best.Rounds, res = res.Rounds, best
	}
	res.Failed = failed
	return res
}
