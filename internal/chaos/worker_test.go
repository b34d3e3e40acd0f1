package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// workerEnv carries a worker's JSON config; a test binary started with it
// runs runWorker instead of the tests.
const workerEnv = "DLOCK_CHAOS_WORKER"

// workerConfig is what one worker process does.
type workerConfig struct {
	LockAddr     string        // Redis holding the lock
	ResourceAddr string        // Redis holding the protected resource
	Name         string        // lock name
	Goroutines   int           // concurrent owners in the process
	Acquisitions int           // per goroutine
	Lease        time.Duration // fixed lease; 0 for the watchdog
	Watchdog     time.Duration // watchdog timeout
	Critical     time.Duration // time spent holding the lock
	Outside      time.Duration // time between acquisitions
	Fenced       bool          // write the resource with the fencing token
	IgnoreLost   bool          // keep working after the lock context ends (a broken holder)
	Pause        bool          // hold once, say so, and write after a pause (see TestPausedHolder)
	// NoRetries turns off go-redis's own retries (of commands, and of
	// dials but one), which would otherwise absorb an outage of up to
	// about two seconds: errors reach dlock.
	NoRetries bool
	Out       string // history file
	// Deadlocks is WithDeadlockDetection's check interval (0: off). Each
	// owner then waits holding a lock of its own (taken once, again if
	// lost), so that its waits are recorded and checked: a Lock that
	// fails with ErrDeadlock is a false positive (one lock has no cycle).
	Deadlocks time.Duration

	// Topologies: a worker reaches the lock through Sentinel (master name
	// and sentinel addresses) or a cluster (node addresses) instead of
	// LockAddr, and may sync each acquisition to replicas.
	SentinelMaster     string
	SentinelAddrs      []string
	ClusterAddrs       []string
	ReplicaSync        int           // dlock.WithReplicaSync count; 0 for off
	ReplicaSyncTimeout time.Duration // its WAIT timeout
}

// lockClient returns the go-redis client for the lock that cfg names. The
// topology clients give up on a failed node quickly, and their read
// timeout stays above the replica sync timeout, as WithReplicaSync needs.
func lockClient(cfg workerConfig) redis.UniversalClient {
	const dial, read, write = time.Second, 3 * time.Second, time.Second
	switch {
	case cfg.SentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.SentinelMaster, SentinelAddrs: cfg.SentinelAddrs,
			DialTimeout: dial, ReadTimeout: read, WriteTimeout: write,
		})
	case len(cfg.ClusterAddrs) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:       cfg.ClusterAddrs,
			DialTimeout: dial, ReadTimeout: read, WriteTimeout: write,
		})
	}
	if cfg.NoRetries {
		// PoolSize 100, not 10 per CPU: go-redis counts the dials that
		// fail over the client's life and, at PoolSize, refuses every
		// dial for up to a second. dlock's own retries no longer dial
		// while Redis is down (internal/transport/reach.go), but the commands in flight when
		// it dies still do, a few per outage: at the default size one
		// outage in five or ten would trip it, and the scenario would
		// measure go-redis's second rather than dlock (docs/safety.md).
		// Without the reach gate, dlock's retries trip even this bar within a
		// few outages.
		return redis.NewClient(&redis.Options{Addr: cfg.LockAddr, MaxRetries: -1, DialerRetries: 1, PoolSize: 100})
	}
	return redis.NewClient(&redis.Options{Addr: cfg.LockAddr})
}

// The resource: a counter incremented non-atomically under the lock, and a
// register written with dlock's fenced write (dlock.FencedSet), which
// refuses tokens lower than the highest it has seen.
const (
	counterKey = "chaos:counter"
	fenceKey   = "chaos:fence"
)

// workerResult is what a worker prints on stdout when it is done.
type workerResult struct {
	Acquired, Increments, Rejected, Lost, Errors int
	Deadlocks                                    int // Locks failed with ErrDeadlock
}

func runWorker(cfgJSON string) error {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	ctx := context.Background()
	lockRdb := lockClient(cfg)
	resRdb := redis.NewClient(&redis.Options{Addr: cfg.ResourceAddr})
	clientOpts := []dlock.Option{dlock.WithWatchdogTimeout(cfg.Watchdog)}
	if os.Getenv("DLOCK_CHAOS_LOG") != "" { // dlock's warnings on stderr, for debugging
		clientOpts = append(clientOpts, dlock.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	}
	if cfg.ReplicaSync > 0 {
		clientOpts = append(clientOpts, dlock.WithReplicaSync(cfg.ReplicaSync, cfg.ReplicaSyncTimeout))
	}
	if cfg.Deadlocks > 0 {
		clientOpts = append(clientOpts, dlock.WithDeadlockDetection(cfg.Deadlocks))
	}
	locks, err := dlock.New(lockRdb, clientOpts...)
	if err != nil {
		return err
	}
	opts := []dlock.LockOption{}
	if cfg.Lease > 0 {
		opts = append(opts, dlock.WithLease(cfg.Lease))
	}
	if cfg.Fenced {
		opts = append(opts, dlock.WithFencing())
	}
	m, err := locks.NewMutex(cfg.Name, opts...)
	if err != nil {
		return err
	}
	if cfg.Pause {
		return pausedHolder(ctx, m, resRdb)
	}
	rec, err := history.Create(cfg.Out)
	if err != nil {
		return err
	}
	var (
		mu  sync.Mutex
		res workerResult
		wg  sync.WaitGroup
	)
	count := func(f func(r *workerResult)) { mu.Lock(); f(&res); mu.Unlock() }
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := ownLock(locks, fmt.Sprintf("%s:owner:%d:%d", cfg.Name, os.Getpid(), g), cfg.Deadlocks > 0)
			defer owner.release()
			// An acquisition's wait runs from its first Lock to the one
			// that succeeds, through the errors of an outage in between.
			start := history.Now()
			for done := 0; done < cfg.Acquisitions; {
				wctx, cancel := context.WithTimeout(owner.ctx(ctx), 30*time.Second)
				lctx, err := m.Lock(wctx)
				cancel()
				if err != nil {
					// Redis down or restarting: count it and try again.
					give := false
					count(func(r *workerResult) {
						r.Errors++
						give = r.Errors > 10000
						if errors.Is(err, dlock.ErrDeadlock) {
							r.Deadlocks++
						}
					})
					if give {
						return
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				h := history.Hold{Acquired: history.Now()}
				h.Wait = h.Acquired - start
				h.Owner, h.Token = ownerOf(lctx), tokenOf(lctx)
				// A holder's belief ends when it is told the lock is gone
				// (its lock context ends), unless it ignores that.
				var told atomic.Int64
				stopTold := context.AfterFunc(lctx, func() { told.Store(history.Now()) })
				inc, rejected := critical(lctx, resRdb, cfg, &h)
				h.Released = history.Now()
				stopTold()
				if at := told.Load(); at != 0 && at < h.Released && !cfg.IgnoreLost {
					h.Released = at
				}
				if err := m.Unlock(lctx); err != nil {
					h.Lost = true
					count(func(r *workerResult) {
						if errors.Is(err, dlock.ErrNotHeld) {
							r.Lost++
						} else {
							r.Errors++
						}
					})
				}
				if err := rec.Add(h); err != nil {
					count(func(r *workerResult) { r.Errors++ })
				}
				count(func(r *workerResult) {
					r.Acquired++
					r.Increments += inc
					r.Rejected += rejected
				})
				done++
				pause(cfg.Outside)
				start = history.Now()
			}
		}()
	}
	wg.Wait()
	if err := rec.Close(); err != nil {
		return err
	}
	if err := locks.Close(); err != nil {
		return err
	}
	lockRdb.Close()
	resRdb.Close()
	if err := redistest.CheckGoroutines(); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// ownedLock is a lock an owner holds while it waits for the chaos lock
// (workerConfig.Deadlocks), so that its waits are nested ones.
type ownedLock struct {
	m    *dlock.Mutex // nil: the owner holds nothing
	held context.Context
}

func ownLock(c *dlock.Client, name string, on bool) *ownedLock {
	if !on {
		return &ownedLock{}
	}
	m, err := c.NewMutex(name)
	if err != nil {
		panic(err) // a valid name: a bug in the test
	}
	return &ownedLock{m: m}
}

// ctx returns the context to wait with: the own lock's lock context,
// taken (again) when it is not held; base when there is none or it
// cannot be had now (an outage: the wait is then a plain one).
func (o *ownedLock) ctx(base context.Context) context.Context {
	if o.m == nil {
		return base
	}
	if o.held == nil || o.held.Err() != nil {
		held, err := o.m.TryLock(base)
		if err != nil {
			o.held = nil
			return base
		}
		o.held = held
	}
	return o.held
}

func (o *ownedLock) release() {
	if o.held != nil {
		_ = o.m.Unlock(o.held)
	}
}

// critical is the work done under the lock: a non-atomic increment of the
// shared counter (lost if two holders overlap) and, when fenced, a fenced
// write of the owner to the register first, recorded in h. It reports
// increments done and writes rejected (ErrStaleToken).
func critical(ctx context.Context, rdb *redis.Client, cfg workerConfig, h *history.Hold) (inc, rejected int) {
	if cfg.IgnoreLost {
		ctx = context.WithoutCancel(ctx)
	}
	n, err := rdb.Get(ctx, counterKey).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0
	}
	pause(cfg.Critical)
	if cfg.Fenced {
		h.WriteStart = history.Now()
		err := dlock.FencedSet(ctx, rdb, dlock.Fence{Token: h.Token, Holder: h.Owner}, fenceKey, h.Owner, 0)
		h.WriteEnd, h.Accepted = history.Now(), err == nil
		if errors.Is(err, dlock.ErrStaleToken) {
			return 0, 1
		}
	}
	if rdb.Set(ctx, counterKey, n+1, 0).Err() == nil {
		inc = 1
	}
	return inc, 0
}

// pause spends d: a busy loop below a millisecond, where time.Sleep would
// take a whole millisecond, and a sleep above.
func pause(d time.Duration) {
	if d >= time.Millisecond {
		time.Sleep(d)
		return
	}
	for start := time.Now(); time.Since(start) < d; {
	}
}

// ownerOf names the owner of a lock context for the history: the pointer
// of the context is unique per hold in the process, and the pid makes it
// unique across processes.
func ownerOf(lctx context.Context) string {
	return fmt.Sprintf("%d:%p", os.Getpid(), lctx)
}

func tokenOf(lctx context.Context) int64 {
	t, _ := dlock.Token(lctx)
	return t
}

// pausedHolder takes the lock, prints "held", and waits in its critical
// section for a line on stdin, which the test sends once it has frozen the
// process past its lease, let another client take the lock, and resumed
// it. Then it reports whether its lock context was cancelled and writes
// the fenced register with its stale token anyway, as a holder that
// ignores its context would.
func pausedHolder(ctx context.Context, m *dlock.Mutex, rdb *redis.Client) error {
	lctx, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	fmt.Println("held")
	// The test sends SIGSTOP, then SIGCONT, then the line.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the test to resume us: %w", err)
	}
	var cause error
	select {
	case <-lctx.Done():
		cause = context.Cause(lctx)
	case <-time.After(5 * time.Second):
	}
	err = dlock.FencedSet(ctx, rdb, dlock.FenceOf(lctx), fenceKey, "paused", 0)
	if err != nil && !errors.Is(err, dlock.ErrStaleToken) {
		return err
	}
	unlockErr := m.Unlock(lctx)
	fmt.Printf("cancelled=%v lost=%v accepted=%v unlock=%v\n",
		cause != nil, errors.Is(cause, dlock.ErrLockLost), err == nil, unlockErr)
	return nil
}
