package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// hotKey is the one lock every worker of the hot-lock scenario fights for.
const hotKey = "bench:hot"

// acqEvent is one acquisition in the hot-lock scenario, in CLOCK_MONOTONIC
// nanoseconds: when Lock was called, when it returned, and when the holder
// called its unlock.
type acqEvent struct {
	G                            int32 // goroutine, unique across processes
	WaitStart, Acquired, Release int64
}

// hotWorkerResult is what one worker process saw.
type hotWorkerResult struct {
	Events []acqEvent
	// Pending are the start times of the waits that the end of the run
	// cut short: their length is a lower bound of the longest wait.
	Pending    []int64
	Errors     int
	FirstError string
	CPU        time.Duration // CPU time the process used in [T0, T1)
}

// hotWorker runs j.Goroutines goroutines that take the hot lock again and
// again: each holds it for j.Hold and then works j.OutsideMin–OutsideMax
// without it, from j.Begin until j.T1.
func hotWorker(j job, l lib) (*hotWorkerResult, error) {
	lk, err := l.open(j.Addr, 0)
	if err != nil {
		return nil, err
	}
	defer closeLocker(lk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cpu0, cpu1 time.Duration
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sleepUntil(j.T0)
		cpu0 = cpuTime()
		sleepUntil(j.T1)
		cpu1 = cpuTime()
		cancel()
	}()

	res := &hotWorkerResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sleepUntil(j.Begin)
	for g := range j.Goroutines {
		gid := int32(j.Worker*j.Goroutines + g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(gid), uint64(j.Begin)))
			var events []acqEvent
			var pending []int64
			errs, first := 0, ""
			for ctx.Err() == nil {
				start := monoNow()
				unlock, err := lk.lock(ctx, hotKey)
				if err != nil {
					if ctx.Err() != nil {
						pending = append(pending, start)
						break
					}
					if errs++; first == "" {
						first = err.Error()
					}
					pause(time.Millisecond)
					continue
				}
				got := monoNow()
				pause(j.Hold)
				release := monoNow()
				if err := unlock(context.Background()); err != nil {
					if errs++; first == "" {
						first = "unlock: " + err.Error()
					}
				}
				events = append(events, acqEvent{G: gid, WaitStart: start, Acquired: got, Release: release})
				pause(j.OutsideMin + time.Duration(rng.Int64N(int64(j.OutsideMax-j.OutsideMin)+1)))
			}
			mu.Lock()
			defer mu.Unlock()
			res.Events = append(res.Events, events...)
			res.Pending = append(res.Pending, pending...)
			res.Errors += errs
			if res.FirstError == "" {
				res.FirstError = first
			}
		}()
	}
	wg.Wait()
	<-sampled
	res.CPU = cpu1 - cpu0
	return res, nil
}

// hotResult is one library's hot-lock run.
type hotResult struct {
	Lib      string
	Acq      int     // acquisitions in the window
	PerSec   float64 // acquisitions per second
	Waits    []int64 // wait of every acquisition in the window (ns)
	Wait     summary
	MaxWait  int64 // longest wait, cut-short waits included
	Handoff  summary
	HoldMean int64 // mean time from Lock returning to the unlock call
	Overlaps int   // acquisitions that started before the previous holder's unlock: must be 0
	// Commands per acquisition: sent by the library, and executed by the
	// server including those its scripts call.
	ClientPerAcq, TotalPerAcq float64
	ByCmd                     map[string]int64
	RedisCPU, ClientCPU       time.Duration
	Window                    time.Duration
	MinPerG, MaxPerG          int // acquisitions per goroutine
	Errors                    int
	FirstError                string
}

// runHot runs the hot-lock scenario for one library: cfg.procs worker
// processes of cfg.perProc goroutines each on a fresh redis-server.
func runHot(cfg config, l lib) (*hotResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer admin.Close()

	begin := monoNow() + int64(cfg.spawn)
	t0 := begin + int64(cfg.warm)
	t1 := t0 + int64(cfg.hotWindow)
	jobs := make([]job, cfg.procs)
	results := make([]any, cfg.procs)
	for i := range jobs {
		jobs[i] = job{
			Mode: "hot", Lib: l.id, Addr: srv.addr, Worker: i, Goroutines: cfg.perProc,
			Begin: begin, T0: t0, T1: t1,
			Hold: cfg.hold, OutsideMin: cfg.outsideMin, OutsideMax: cfg.outsideMax,
		}
		if cfg.profileDir != "" {
			jobs[i].Profile = filepath.Join(cfg.profileDir, fmt.Sprintf("hot-%s-%d.pprof", l.id, i))
		}
		results[i] = &hotWorkerResult{}
	}
	var s0, s1 serverStats
	var sErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		ctx := context.Background()
		sleepUntil(t0)
		s0, sErr = sampleServer(ctx, admin)
		sleepUntil(t1)
		if sErr == nil {
			s1, sErr = sampleServer(ctx, admin)
		}
	}()
	err = runJobs(jobs, results)
	<-sampled
	if err != nil {
		return nil, err
	}
	if sErr != nil {
		return nil, sErr
	}

	r := &hotResult{Lib: l.id, Window: time.Duration(t1 - t0)}
	var events []acqEvent
	var pending []int64
	for _, x := range results {
		w := x.(*hotWorkerResult)
		events = append(events, w.Events...)
		pending = append(pending, w.Pending...)
		r.Errors += w.Errors
		if r.FirstError == "" {
			r.FirstError = w.FirstError
		}
		r.ClientCPU += w.CPU
	}
	analyzeHot(r, events, pending, t0, t1, cfg.procs*cfg.perProc)
	d := s1.delta(s0, l.clientCmds)
	r.RedisCPU = d.cpu
	r.ByCmd = d.byCmd
	if r.Acq > 0 {
		r.ClientPerAcq = float64(d.client) / float64(r.Acq)
		r.TotalPerAcq = float64(d.total) / float64(r.Acq)
	}
	return r, nil
}

// analyzeHot orders the acquisitions of every process in time: the lock
// passes from each one to the next. An acquisition whose Lock call began
// before the previous holder's unlock waited for it, and the time from
// that unlock call to its Lock returning is a handoff.
func analyzeHot(r *hotResult, events []acqEvent, pending []int64, t0, t1 int64, goroutines int) {
	slices.SortFunc(events, func(a, b acqEvent) int { return cmp.Compare(a.Acquired, b.Acquired) })
	var handoffs []int64
	var held int64
	perG := make([]int, goroutines)
	for i, e := range events {
		if e.Acquired < t0 || e.Acquired >= t1 {
			continue
		}
		r.Acq++
		perG[e.G]++
		held += e.Release - e.Acquired
		wait := e.Acquired - e.WaitStart
		r.Waits = append(r.Waits, wait)
		r.MaxWait = max(r.MaxWait, wait)
		if i == 0 {
			continue
		}
		prev := events[i-1]
		switch {
		case e.Acquired < prev.Release:
			// Lock returned before the holder even called unlock: two
			// holders at once.
			r.Overlaps++
		case e.WaitStart < prev.Release:
			handoffs = append(handoffs, e.Acquired-prev.Release)
		}
	}
	for _, p := range pending {
		if p < t1 {
			r.MaxWait = max(r.MaxWait, t1-p)
		}
	}
	if r.Acq > 0 {
		r.HoldMean = held / int64(r.Acq)
	}
	r.Wait = summarize(r.Waits)
	r.Handoff = summarize(handoffs)
	r.PerSec = float64(r.Acq) / (float64(t1-t0) / 1e9)
	r.MinPerG, r.MaxPerG = slices.Min(perG), slices.Max(perG)
}
