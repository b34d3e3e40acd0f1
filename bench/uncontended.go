package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// opTimeout bounds one uncontended Lock.
const opTimeout = 5 * time.Second

// uncontendedWorkerResult is one uncontended run.
type uncontendedWorkerResult struct {
	Ops          int     // Lock+Unlock pairs completed in the window
	Latencies    []int64 // of those pairs (ns)
	Client       int64   // commands the library sent in the window
	Total        int64   // commands the server executed, script-internal included
	RedisCPU     time.Duration
	ClientCPU    time.Duration
	Errors       int
	FirstError   string
	ByCmd        map[string]int64
	KeysLeft     int64 // DBSIZE after the window
	WindowNanos  int64
	GoroutineSet int
}

// uncontendedWorker runs j.Goroutines goroutines, each locking and
// unlocking its own key as fast as it can.
func uncontendedWorker(j job, l lib) (*uncontendedWorkerResult, error) {
	lk, err := l.open(j.Addr, 0)
	if err != nil {
		return nil, err
	}
	defer closeLocker(lk)
	return lockLoop(j, lk, []string{j.Addr}, l.clientCmds)
}

// lockLoop is the uncontended measurement: j.Goroutines goroutines lock
// and unlock their own keys with lk from j.Begin to j.T1, and the window
// [j.T0, j.T1) is measured. The servers at addrs are sampled at both ends
// and their counters added up (a RedLock's commands go to all of them);
// clientCmds are the commands lk's library sends itself.
func lockLoop(j job, lk locker, addrs []string, clientCmds []string) (*uncontendedWorkerResult, error) {
	admins := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		admins[i] = redis.NewClient(&redis.Options{Addr: a})
		defer admins[i].Close()
	}

	var s0, s1 serverStats
	var cpu0, cpu1 time.Duration
	var keys int64
	var sErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sleepUntil(j.T0)
		cpu0 = cpuTime()
		s0, sErr = sampleServers(context.Background(), admins)
		sleepUntil(j.T1)
		cpu1 = cpuTime()
		if sErr == nil {
			s1, sErr = sampleServers(context.Background(), admins)
		}
		for _, admin := range admins {
			if sErr == nil {
				var n int64
				n, sErr = admin.DBSize(context.Background()).Result()
				keys += n
			}
		}
	}()

	res := &uncontendedWorkerResult{WindowNanos: j.T1 - j.T0, GoroutineSet: j.Goroutines}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sleepUntil(j.Begin)
	for g := range j.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			key := fmt.Sprintf("bench:u:%d", g)
			var lat []int64
			errs, first := 0, ""
			for {
				start := monoNow()
				if start >= j.T1 {
					break
				}
				// A deadline, so that a library that fails to take a free
				// lock shows as errors instead of hanging the run.
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
		}()
	}
	wg.Wait()
	<-sampled
	if sErr != nil {
		return nil, sErr
	}
	res.Ops = len(res.Latencies)
	d := s1.delta(s0, clientCmds)
	res.Client, res.Total, res.RedisCPU, res.ByCmd = d.client, d.total, d.cpu, d.byCmd
	res.ClientCPU = cpu1 - cpu0
	res.KeysLeft = keys
	return res, nil
}

// uncontendedResult is the best of a library's rounds at one concurrency.
type uncontendedResult struct {
	Lib                     string
	Goroutines              int
	PerSec                  float64
	Latency                 summary
	ClientPerOp, TotalPerOp float64
	RedisCPU, ClientCPU     time.Duration
	Window                  time.Duration
	KeysLeft                int64
	Errors                  int
	FirstError              string
	Rounds                  []float64 // throughput of every round
}

// runUncontended measures one library at one concurrency in one worker
// process on a fresh redis-server.
func runUncontended(cfg config, l lib, goroutines, round int) (*uncontendedResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	begin := monoNow() + int64(cfg.spawn)
	t0 := begin + int64(cfg.warm)
	j := job{Mode: "uncontended", Lib: l.id, Addr: srv.addr, Goroutines: goroutines,
		Begin: begin, T0: t0, T1: t0 + int64(cfg.uncWindow)}
	if cfg.profileDir != "" {
		j.Profile = filepath.Join(cfg.profileDir, fmt.Sprintf("uncontended-%s-%d-%d.pprof", l.id, goroutines, round))
	}
	w := &uncontendedWorkerResult{}
	if err := runJobs([]job{j}, []any{w}); err != nil {
		return nil, err
	}
	return w.result(l.id), nil
}

// result summarizes a worker's run of library lib.
func (w *uncontendedWorkerResult) result(lib string) *uncontendedResult {
	win := time.Duration(w.WindowNanos)
	r := &uncontendedResult{
		Lib: lib, Goroutines: w.GoroutineSet,
		PerSec:   float64(w.Ops) / win.Seconds(),
		Latency:  summarize(w.Latencies),
		RedisCPU: w.RedisCPU, ClientCPU: w.ClientCPU, Window: win, KeysLeft: w.KeysLeft,
		Errors: w.Errors, FirstError: w.FirstError,
	}
	if w.Ops > 0 {
		r.ClientPerOp = float64(w.Client) / float64(w.Ops)
		r.TotalPerOp = float64(w.Total) / float64(w.Ops)
	}
	return r
}
