package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// watchdogResult is one library keeping j.Locks locks alive.
type watchdogResult struct {
	Lib                 string
	Locks               int
	Held                int // locks whose key still exists after the window
	LockTime            time.Duration
	RenewPerSec         float64 // round trips per second (client hook)
	TotalPerSec         float64 // commands the server executed per second
	ClientCPU, RedisCPU time.Duration
	Window              time.Duration
	Goroutines          int     // goroutines in the process while holding (the most seen in the window)
	Renewed             int64   // leases renewed in the window (PEXPIRE calls)
	HeapPerLock         float64 // HeapInuse after GC with every lock held, less before, per lock
	// Lost locks, by the reason their lock context gave (dlock only):
	// the local deadline passed before a renewal confirmed the lease, or
	// a renewal found the lock gone from Redis (which no one else touches
	// here: a lease that ran out in Redis before its local deadline).
	LostDeadline, LostGone int64
	Errors                 int
	FirstError             string
	Left                   footprint
	// Failed is why the run gave no result ("" when it did).
	Failed string
}

// watchdogWorker takes j.Locks locks whose leases are renewed every
// j.Renewal/3, lets renewal settle, and measures renewal traffic and the
// process's CPU over j.Window.
func watchdogWorker(j job, l lib) (*watchdogResult, error) {
	lk, err := l.open(j.Addr, j.Renewal)
	if err != nil {
		return nil, err
	}
	defer closeLocker(lk)
	admin := redis.NewClient(&redis.Options{Addr: j.Addr})
	defer admin.Close()
	ctx := context.Background()

	r := &watchdogResult{Lib: l.id, Locks: j.Locks, Window: j.Window}
	names := make([]string, j.Locks)
	for i := range names {
		names[i] = fmt.Sprintf("bench:wd:%d", i)
	}
	heap0 := heapInuse()
	maxG := sampleMax(runtime.NumGoroutine) // while taking the locks too
	start := time.Now()
	unlocks, errs, first := lockAll(ctx, lk, names, j.Goroutines)
	r.LockTime = time.Since(start)
	r.HeapPerLock = float64(heapInuse()-heap0) / float64(j.Locks)
	stopProfile, err := profileWindow(j.Profile)
	if err != nil {
		return nil, err
	}

	st, err := measureSteady(ctx, admin, lk, j.Settle, j.Window)
	r.Goroutines = maxG()
	stopProfile()
	if err != nil {
		return nil, err
	}
	r.Renewed = st.server.pexpires
	r.RenewPerSec = float64(st.roundTrips) / j.Window.Seconds()
	r.TotalPerSec = float64(st.server.total) / j.Window.Seconds()
	r.ClientCPU, r.RedisCPU = st.clientCPU, st.server.cpu

	// A lease that was not renewed has expired by now: the window is
	// longer than the lease.
	pipe := admin.Pipeline()
	exists := make([]*redis.IntCmd, len(names))
	for i, n := range names {
		exists[i] = pipe.Exists(ctx, l.redisKey(n))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	for _, e := range exists {
		r.Held += int(e.Val())
	}
	n, uFirst := unlockAll(ctx, unlocks)
	r.Errors = errs + n
	if lc, ok := lk.(lossCounter); ok {
		r.LostDeadline, r.LostGone = lc.losses()
	}
	if r.FirstError = first; first == "" {
		r.FirstError = uFirst
	}
	return r, nil
}

// profileWindow writes a heap profile to path+".heap" now, and starts a
// CPU profile into path, which the returned function stops; nothing when
// path is empty.
func profileWindow(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	h, err := os.Create(path + ".heap")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := pprof.Lookup("heap").WriteTo(h, 0); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// heapInuse returns the heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// sampleMax samples f every 50 ms until the returned function is called,
// which returns the largest value seen.
func sampleMax(f func() int) func() int {
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		most := f()
		for {
			select {
			case <-stop:
				done <- max(most, f())
				return
			case <-t.C:
				most = max(most, f())
			}
		}
	}()
	return func() int { close(stop); return <-done }
}

// lossCounter is a locker that tells why the locks it gave up were lost.
type lossCounter interface {
	// losses counts the locks found lost at their unlock: by their local
	// deadline, and found gone from Redis by a renewal.
	losses() (deadline, gone int64)
}

// unlockTimeout bounds the release of every lock at the end of the
// watchdog and waiter scenarios: 30 s, and 100 µs more per lock.
func unlockTimeout(locks int) time.Duration {
	return 30*time.Second + time.Duration(locks)*100*time.Microsecond
}

// unlockAll releases every lock, 32 at a time, and counts the failures. A
// release that has not returned after unlockTimeout counts as failed and
// is left behind: the worker process exits anyway.
func unlockAll(ctx context.Context, unlocks []func(context.Context) error) (errs int, first string) {
	var next atomic.Int64
	var failed atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(unlocks) {
					return
				}
				if unlocks[i] == nil {
					continue
				}
				if err := unlocks[i](ctx); err != nil {
					failed.Add(1)
					mu.Lock()
					if first == "" {
						first = err.Error()
					}
					mu.Unlock()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(unlockTimeout(len(unlocks))):
		mu.Lock()
		defer mu.Unlock()
		left := len(unlocks) - int(next.Load()) + 32
		return int(failed.Load()) + left, fmt.Sprintf("releasing the locks had not finished after %v (hung in the library)", unlockTimeout(len(unlocks)))
	}
	return int(failed.Load()), first
}

// lockAll takes every lock in names, n at a time, and returns their
// unlock functions. A lock not taken within opTimeout is given up and
// counted as an error; its unlock function is nil.
func lockAll(ctx context.Context, lk locker, names []string, n int) (unlocks []func(context.Context) error, errs int, first string) {
	unlocks = make([]func(context.Context) error, len(names))
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) {
					return
				}
				// rueidislock releases a lock whose ctx ends, so the ctx
				// lives until unlock and the timeout cancels it only
				// while Lock is waiting.
				lctx, cancel := context.WithCancel(ctx)
				timer := time.AfterFunc(opTimeout, cancel)
				u, err := lk.lock(lctx, names[i])
				if !timer.Stop() && err == nil {
					_ = u(ctx)
					err = fmt.Errorf("lock %s: not taken within %v", names[i], opTimeout)
				}
				if err != nil {
					cancel()
					mu.Lock()
					if errs++; first == "" {
						first = err.Error()
					}
					mu.Unlock()
					continue
				}
				unlocks[i] = func(ctx context.Context) error {
					defer cancel()
					return u(ctx)
				}
			}
		})
	}
	wg.Wait()
	return unlocks, errs, first
}

// runWatchdog runs the watchdog scenario for one library.
func runWatchdog(cfg config, l lib) (*watchdogResult, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	j := job{Mode: "watchdog", Lib: l.id, Addr: srv.Addr(), Locks: cfg.wdLocks,
		Goroutines: cfg.wdAcquirers, Profile: profilePath(cfg, "watchdog-"+l.id), Renewal: cfg.wdRenewal, Settle: cmp.Or(cfg.wdSettle, cfg.wdRenewal), Window: cfg.wdWindow}
	r := &watchdogResult{}
	left, err := runOn(cfg.hang, []string{srv.Addr()}, []job{j}, []any{r})
	if err != nil {
		return nil, err
	}
	r.Left = left
	return r, nil
}

// profilePath is where a worker profiles its run, "" without -profile.
func profilePath(cfg config, name string) string {
	if cfg.profileDir == "" {
		return ""
	}
	return filepath.Join(cfg.profileDir, name+".pprof")
}
