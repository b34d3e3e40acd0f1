package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// hotKey is the one lock every goroutine of the hot-lock scenario fights
// for.
const hotKey = "bench:hot"

// acqEvent is one acquisition in the hot-lock scenario, in CLOCK_MONOTONIC
// nanoseconds: when Lock was called, when it returned, and when the holder
// called its unlock.
type acqEvent struct {
	G                            int32 // goroutine
	WaitStart, Acquired, Release int64
}

// hotWorkerResult is what the worker process saw.
type hotWorkerResult struct {
	Events []acqEvent
	// Pending are the start times of the waits that the end of the run
	// cut short: their length is a lower bound of the longest wait.
	Pending    []int64
	RoundTrips int64 // counted by the clients' hooks in [T0, T1)
	Errors     int
	Deadlocks  int // Locks failed with dlock.ErrDeadlock: false positives
	FirstError string
	CPU        time.Duration // CPU time the process used in [T0, T1)
}

// hotWorker opens j.Clients lockers (each its own client and connection
// pool) and runs j.Goroutines goroutines on each that take the hot lock
// again and again: hold it for j.Work of CPU-bound work, release it, sleep
// j.Think, from j.Begin until j.T1. Every Lock's ctx has j.T1 as its
// deadline, as a request's ctx would, so that a library that runs a Lock
// with a deadline on the caller's goroutine (dlock on rueidis, or on
// go-redis with ContextTimeoutEnabled) does so here.
func hotWorker(j job, l lib) (*hotWorkerResult, error) {
	lks := make([]locker, j.Clients)
	for i := range lks {
		lk, err := l.open(j.Addr, 0)
		if err != nil {
			return nil, err
		}
		defer closeLocker(lk)
		lks[i] = lk
	}
	roundTrips := func() (n int64) {
		for _, lk := range lks {
			n += lk.roundTrips()
		}
		return n
	}
	b := burner{perIter: j.PerIter}
	deadline := timeAt(j.T1)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// over reports whether the window has ended: a library can return at
	// its ctx's deadline a moment before ctx itself says so.
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(deadline) }
	var cpu0, cpu1 time.Duration
	var rt0, rt1 int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sleepUntil(j.T0)
		cpu0, rt0 = cpuTime(), roundTrips()
		sleepUntil(j.T1)
		cpu1, rt1 = cpuTime(), roundTrips()
		cancel()
	}()

	res := &hotWorkerResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sleepUntil(j.Begin)
	for c, lk := range lks {
		for g := range j.Goroutines {
			gid := int32(c*j.Goroutines + g)
			wg.Go(func() {
				var events []acqEvent
				var pending []int64
				errs, first, deadlocks := 0, "", 0
				for ctx.Err() == nil {
					start := monoNow()
					unlock, err := lk.lock(ctx, hotKey)
					if err != nil {
						if over() {
							pending = append(pending, start)
							break
						}
						if errs++; first == "" {
							first = err.Error()
						}
						if errors.Is(err, dlock.ErrDeadlock) {
							deadlocks++
						}
						time.Sleep(j.Think)
						continue
					}
					got := monoNow()
					b.burn(j.Work)
					release := monoNow()
					if err := unlock(context.Background()); err != nil {
						if errs++; first == "" {
							first = "unlock: " + err.Error()
						}
					}
					events = append(events, acqEvent{G: gid, WaitStart: start, Acquired: got, Release: release})
					time.Sleep(j.Think)
				}
				mu.Lock()
				defer mu.Unlock()
				res.Events = append(res.Events, events...)
				res.Pending = append(res.Pending, pending...)
				res.Errors += errs
				res.Deadlocks += deadlocks
				if res.FirstError == "" {
					res.FirstError = first
				}
			})
		}
	}
	wg.Wait()
	<-sampled
	res.CPU = cpu1 - cpu0
	res.RoundTrips = rt1 - rt0
	return res, nil
}

// hotResult is one library's hot-lock run.
type hotResult struct {
	Lib      string
	Hook     string
	Acq      int     // acquisitions in the window
	PerSec   float64 // acquisitions per second
	Waits    []int64 // wait of every acquisition in the window (ns)
	Wait     summary
	MaxWait  int64 // longest wait, cut-short waits included
	Handoff  summary
	HoldMean int64 // mean time from Lock returning to the unlock call
	Overlaps int   // acquisitions that returned before the previous holder's unlock call: must be 0
	// Per acquisition: round trips counted by the client hook, pub/sub
	// (un)subscriptions and all commands executed (INFO commandstats).
	RoundTrips, Subscribes, Executed float64
	RedisCPU, ClientCPU              time.Duration // in the window
	Window                           time.Duration
	MinPerG, MaxPerG                 int // acquisitions per goroutine
	Left                             footprint
	Errors                           int
	Deadlocks                        int // Locks failed with dlock.ErrDeadlock
	FirstError                       string
	Rounds                           []float64 // acquisitions/s of every round
	// Failed is why the run, or one of the rounds kept in this row, gave
	// no result ("" when every one did).
	Failed string
}

// runHot runs the hot-lock scenario for one library in one worker process
// on a fresh redis-server.
func runHot(cfg config, l lib) (*hotResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()

	begin := monoNow() + int64(cfg.spawn)
	t0 := begin + int64(cfg.warm)
	t1 := t0 + int64(cfg.hotWindow)
	j := job{
		Mode: "hot", Lib: l.id, Addr: srv.Addr(), Clients: cfg.clients, Goroutines: cfg.perClient,
		Begin: begin, T0: t0, T1: t1, Work: cfg.work, Think: cfg.think, PerIter: cfg.burner.perIter,
	}
	if cfg.profileDir != "" {
		j.Profile = filepath.Join(cfg.profileDir, fmt.Sprintf("hot-%s.pprof", l.id))
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
	w := &hotWorkerResult{}
	left, err := runOn(cfg.hang, []string{srv.Addr()}, []job{j}, []any{w})
	<-sampled
	if err != nil {
		return nil, err
	}
	if sErr != nil {
		return nil, sErr
	}

	r := &hotResult{Lib: l.id, Hook: l.hook, Window: time.Duration(t1 - t0), Left: left,
		Errors: w.Errors, Deadlocks: w.Deadlocks, FirstError: w.FirstError, ClientCPU: w.CPU}
	analyzeHot(r, w.Events, w.Pending, t0, t1, cfg.clients*cfg.perClient)
	d := s1.delta(s0)
	r.RedisCPU = d.cpu
	if r.Acq > 0 {
		n := float64(r.Acq)
		r.RoundTrips = float64(w.RoundTrips) / n
		r.Subscribes = float64(d.subscribes) / n
		r.Executed = float64(d.total) / n
	}
	return r, nil
}

// analyzeHot orders the acquisitions in time: the lock passes from each
// one to the next. An acquisition whose Lock call began before the
// previous holder's unlock waited for it, and the time from that unlock
// call to its Lock returning is a handoff.
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
