package verify

// The worker: the client process of a run. The harness starts its own
// executable again, in a client namespace, with the worker's configuration
// in the environment (WorkerMain); the worker contends for one dlock lock
// through dlock's public API until its deadline and writes its history,
// one JSON event per line: the invocation and the completion of every
// acquire and release, on CLOCK_MONOTONIC (one clock for every process on
// the host, whatever their namespaces) and on the wall clock.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/clock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// workerEnv carries a worker's JSON configuration.
const workerEnv = "DLOCK_VERIFY_WORKER"

// Workloads.
const (
	WorkMutex = "mutex" // Mutex with fencing: counter and fenced register
	WorkFair  = "fair"  // FairMutex with fencing: as WorkMutex
	WorkRW    = "rw"    // RWMutex: readers and writers, writers count
	WorkSem   = "sem"   // PermitSemaphore of SemPermits permits
)

// SemPermits is the size of the semaphore workload's semaphore.
const SemPermits = 2

// Broken clients, the negative controls.
const (
	BrokenNone = ""
	// BrokenIgnoreLost keeps working after its lock context ended: it
	// believes it holds until Unlock returns and writes the counter anyway.
	BrokenIgnoreLost = "ignore-lost"
	// BrokenUnfenced is a correct client whose storage skips the fencing
	// check: the register accepts every write.
	BrokenUnfenced = "unfenced"
	// BrokenHandOverNoSeq is a FairMutex client built with the tag
	// dlock_broken_handover (workerBinary): its waiters take any
	// hand-over message as a grant, also one older than their latest
	// attempt that found the lock another's, whose hold has ended.
	BrokenHandOverNoSeq = "handover-no-seq"
)

// brokenTag is the build tag of BrokenHandOverNoSeq's worker.
const brokenTag = "dlock_broken_handover"

// WorkerConfig is what one worker process does.
type WorkerConfig struct {
	ID         int      // client number, for the history
	Out        string   // history file; the client's dlock ID goes to Out+".id"
	LockAddr   string   // a single server, or
	Sentinels  []string // sentinel addresses of masterName, or
	Cluster    []string // the cluster's nodes
	Resource   string   // the resource server (counter, register)
	Name       string   // lock name
	Workload   string
	Broken     string
	Goroutines int
	Until      int64 // CLOCK_MONOTONIC ns at which to stop acquiring

	Watchdog    time.Duration // watchdog timeout (lease of a hold without Lease)
	Lease       time.Duration // fixed lease of every hold; 0 for the watchdog
	Critical    time.Duration // time in the critical section
	Overrun     time.Duration // a hold in OverrunOdds takes this long instead
	OverrunOdds int           // one hold in OverrunOdds overruns; 0 never
	ReplicaSync bool          // WithReplicaSync(1, time.Second)
	ClockJump   time.Duration // SIGUSR1 moves dlock's wall clock by this, SIGUSR2 back
}

// Event is one line of a history.
type Event struct {
	Client int    `json:"c"`             // process*100 + goroutine
	Op     string `json:"op"`            // acquire, release (with Mode)
	Mode   string `json:"mode"`          // "" (mutex), read, write, permit
	Kind   string `json:"k"`             // invoke, ok, fail
	Mono   int64  `json:"mono"`          // CLOCK_MONOTONIC ns
	Wall   int64  `json:"wall"`          // Unix ns
	Token  int64  `json:"tok,omitempty"` // fencing token of an acquire
	Lost   bool   `json:"lost,omitempty"`
	Err    string `json:"err,omitempty"`
}

// WorkerResult is what a worker prints on stdout when done.
type WorkerResult struct {
	Acquired, Increments, Ambiguous, Errors int
}

// Mono reads CLOCK_MONOTONIC in nanoseconds.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock id
	}
	return ts.Nano()
}

// WorkerMain runs the worker and exits when the process was started as
// one; otherwise it returns. Call it first in main and in TestMain.
func WorkerMain() {
	cfg := os.Getenv(workerEnv)
	if cfg == "" {
		return
	}
	if err := runWorker(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// holder is one of the workload's primitives, seen as acquire/release.
type holder interface {
	acquire(ctx context.Context, mode string) (context.Context, error)
	release(hctx context.Context, mode string) error
}

type workerState struct {
	cfg   WorkerConfig
	h     holder
	res   *redis.Client
	mu    sync.Mutex
	w     *bufio.Writer
	out   WorkerResult
	count sync.Mutex
}

func (s *workerState) record(e Event) {
	e.Wall = time.Now().UnixNano()
	b, _ := json.Marshal(e)
	s.mu.Lock()
	s.w.Write(append(b, '\n'))
	s.mu.Unlock()
}

func (s *workerState) add(f func(r *WorkerResult)) {
	s.count.Lock()
	f(&s.out)
	s.count.Unlock()
}

func runWorker(cfgJSON string) error {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	if err := checkBuild(cfg); err != nil {
		return err
	}
	if cfg.ClockJump != 0 {
		defer jumpOnSignal(cfg.ClockJump)()
	}
	lockRdb := lockClient(cfg)
	defer lockRdb.Close()
	opts := []dlock.Option{dlock.WithWatchdogTimeout(cfg.Watchdog)}
	if cfg.ReplicaSync {
		opts = append(opts, dlock.WithReplicaSync(1, time.Second))
	}
	locks, err := dlock.New(lockRdb, opts...)
	if err != nil {
		return err
	}
	defer locks.Close()
	if err := os.WriteFile(cfg.Out+".id", []byte(locks.ID()), 0o644); err != nil {
		return err
	}
	h, err := newHolder(cfg, locks)
	if err != nil {
		return err
	}
	f, err := os.Create(cfg.Out)
	if err != nil {
		return err
	}
	s := &workerState{cfg: cfg, h: h, w: bufio.NewWriter(f),
		res: redis.NewClient(&redis.Options{Addr: cfg.Resource})}
	defer s.res.Close()
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Go(func() { s.loop(cfg.ID*100 + g) })
	}
	wg.Wait()
	if err := errors.Join(s.w.Flush(), f.Close()); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(s.out)
}

// checkBuild refuses a worker whose dlock is not the client cfg asks for:
// BrokenHandOverNoSeq's must be built with brokenTag (a negative control
// run on a correct client would pass for the wrong reason), and every
// other one without it.
func checkBuild(cfg WorkerConfig) error {
	broken := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), brokenTag) {
				broken = true
			}
		}
	}
	switch want := cfg.Broken == BrokenHandOverNoSeq; {
	case want && !broken:
		return fmt.Errorf("dlock/verify: the %s client needs a worker built with -tags %s", cfg.Broken, brokenTag)
	case broken && !want:
		return fmt.Errorf("dlock/verify: this worker is built with -tags %s: it runs only the %s client", brokenTag, BrokenHandOverNoSeq)
	}
	return nil
}

// jumpOnSignal moves dlock's wall clock (internal/clock) by d on SIGUSR1
// and back on SIGUSR2, until the returned stop is called: the harness's
// client clock jump, which libfaketime cannot make in a Go program.
func jumpOnSignal(d time.Duration) (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGUSR1 {
					clock.Jump(d)
				} else {
					clock.Jump(-d)
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// lockClient is the go-redis client for the lock: plain, Sentinel or
// Cluster. Its
// read timeout stays above WithReplicaSync's WAIT timeout.
func lockClient(cfg WorkerConfig) redis.UniversalClient {
	const dial, read, write = time.Second, 2 * time.Second, time.Second
	if len(cfg.Cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Cluster,
			DialTimeout: dial, ReadTimeout: read, WriteTimeout: write})
	}
	if len(cfg.Sentinels) > 0 {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: masterName, SentinelAddrs: cfg.Sentinels,
			DialTimeout: dial, ReadTimeout: read, WriteTimeout: write,
		})
	}
	return redis.NewClient(&redis.Options{Addr: cfg.LockAddr, DialTimeout: dial, ReadTimeout: read, WriteTimeout: write})
}

// loop acquires and releases until the worker's deadline.
func (s *workerState) loop(client int) {
	ctx := context.Background()
	for Mono() < s.cfg.Until {
		mode := s.mode()
		s.record(Event{Client: client, Op: "acquire", Mode: mode, Kind: "invoke", Mono: Mono()})
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		hctx, err := s.h.acquire(actx, mode)
		cancel()
		if err != nil {
			s.record(Event{Client: client, Op: "acquire", Mode: mode, Kind: "fail", Mono: Mono(), Err: err.Error()})
			s.add(func(r *WorkerResult) { r.Errors++ })
			time.Sleep(20 * time.Millisecond)
			continue
		}
		fence := dlock.FenceOf(hctx)
		s.record(Event{Client: client, Op: "acquire", Mode: mode, Kind: "ok", Mono: Mono(), Token: fence.Token})
		s.add(func(r *WorkerResult) { r.Acquired++ })

		// A holder believes it holds until it is told otherwise (its
		// context ends) or it lets go, unless it ignores being told.
		var told atomic.Int64
		stopTold := context.AfterFunc(hctx, func() { told.Store(Mono()) })
		s.critical(hctx, mode, fence)
		stop := Mono()
		stopTold()
		if at := told.Load(); at != 0 && at < stop && s.cfg.Broken != BrokenIgnoreLost {
			stop = at
		}
		s.record(Event{Client: client, Op: "release", Mode: mode, Kind: "invoke", Mono: stop})
		err = s.h.release(hctx, mode)
		s.record(Event{Client: client, Op: "release", Mode: mode, Kind: "ok", Mono: Mono(), Lost: err != nil})
		time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
	}
}

func (s *workerState) mode() string {
	switch s.cfg.Workload {
	case WorkRW:
		if rand.IntN(10) < 7 {
			return "read"
		}
		return "write"
	case WorkSem:
		return "permit"
	}
	return ""
}

// The fenced register: a write carries its fencing token and its holder
// (dlock.FenceOf); when ARGV[2] is 1 the register applies dlock's storage
// check (fenced_write.lua, FencedSet): it refuses a token lower than the
// highest it accepted, and the same token from another holder. It counts
// the stale writes it was sent (a lower token, or the same token from
// another holder), those among them with an equal token, and those it
// accepted.
var fencedWrite = redis.NewScript(`
local max = tonumber(redis.call('hget', KEYS[1], 'max') or '0')
local owner = redis.call('hget', KEYS[1], 'owner')
local t = tonumber(ARGV[1])
local equal = t == max and owner and owner ~= ARGV[3]
if t < max or equal then
  redis.call('hincrby', KEYS[1], 'stale_attempted', 1)
  if equal then redis.call('hincrby', KEYS[1], 'equal_attempted', 1) end
  if ARGV[2] == '1' then
    redis.call('hincrby', KEYS[1], 'rejected', 1)
    return 0
  end
  redis.call('hincrby', KEYS[1], 'stale_accepted', 1)
end
if t >= max then redis.call('hset', KEYS[1], 'max', t, 'owner', ARGV[3]) end
redis.call('hincrby', KEYS[1], 'writes', 1)
return 1`)

// Keys of the resource server.
const (
	counterKey  = "verify:counter"
	registerKey = "verify:register"
)

// critical is the work under the lock. Writers and mutex holders
// increment the counter non-atomically (a GET, the critical section, a
// SET: an overlap loses an increment); mutex holders also write the fenced
// register. The counter's SET honours the lock context unless the client
// ignores lost locks. The register write does not: it stands for a write
// already on its way when the lease ran out, the case fencing is for.
func (s *workerState) critical(hctx context.Context, mode string, fence dlock.Fence) {
	d := s.cfg.Critical
	if s.cfg.OverrunOdds > 0 && rand.IntN(s.cfg.OverrunOdds) == 0 {
		d = s.cfg.Overrun
	}
	ctx := hctx
	if s.cfg.Broken == BrokenIgnoreLost {
		ctx = context.WithoutCancel(hctx)
	}
	if mode == "read" || mode == "permit" {
		sleepCtx(ctx, d)
		return
	}
	n, err := s.res.Get(ctx, counterKey).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	sleepCtx(ctx, d)
	if fence.Token > 0 {
		check := "1"
		if s.cfg.Broken == BrokenUnfenced {
			check = "0"
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), 2*time.Second)
		fencedWrite.Run(wctx, s.res, []string{registerKey}, fence.Token, check, fence.Holder).Err()
		cancel()
	}
	err = s.res.Set(ctx, counterKey, n+1, 0).Err()
	switch {
	case err == nil:
		s.add(func(r *WorkerResult) { r.Increments++ })
	case ctx.Err() == nil:
		s.add(func(r *WorkerResult) { r.Ambiguous++ }) // may have landed
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// newHolder makes the workload's primitive.
func newHolder(cfg WorkerConfig, c *dlock.Client) (holder, error) {
	var lockOpts []dlock.LockOption
	var permitOpts []dlock.PermitOption
	if cfg.Lease > 0 {
		lockOpts = append(lockOpts, dlock.WithLease(cfg.Lease))
		permitOpts = append(permitOpts, dlock.WithPermitLease(cfg.Lease))
	}
	switch cfg.Workload {
	case WorkMutex:
		m, err := c.NewMutex(cfg.Name, append(lockOpts, dlock.WithFencing())...)
		return mutexHolder{m}, err
	case WorkFair:
		m, err := c.NewFairMutex(cfg.Name, append(lockOpts, dlock.WithFencing())...)
		return fairHolder{m}, err
	case WorkRW:
		rw, err := c.NewRWMutex(cfg.Name, lockOpts...)
		return rwHolder{rw}, err
	case WorkSem:
		sem, err := c.NewPermitSemaphore(cfg.Name, permitOpts...)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := sem.TrySetPermits(ctx, SemPermits); err != nil {
			return nil, err
		}
		return semHolder{sem}, nil
	}
	return nil, fmt.Errorf("dlock/verify: unknown workload %q", cfg.Workload)
}

type mutexHolder struct{ m *dlock.Mutex }

func (h mutexHolder) acquire(ctx context.Context, _ string) (context.Context, error) {
	return h.m.Lock(ctx)
}
func (h mutexHolder) release(hctx context.Context, _ string) error { return h.m.Unlock(hctx) }

type fairHolder struct{ m *dlock.FairMutex }

func (h fairHolder) acquire(ctx context.Context, _ string) (context.Context, error) {
	return h.m.Lock(ctx)
}
func (h fairHolder) release(hctx context.Context, _ string) error { return h.m.Unlock(hctx) }

type rwHolder struct{ rw *dlock.RWMutex }

func (h rwHolder) acquire(ctx context.Context, mode string) (context.Context, error) {
	if mode == "read" {
		return h.rw.ReadLock().Lock(ctx)
	}
	return h.rw.WriteLock().Lock(ctx)
}

func (h rwHolder) release(hctx context.Context, mode string) error {
	if mode == "read" {
		return h.rw.ReadLock().Unlock(hctx)
	}
	return h.rw.WriteLock().Unlock(hctx)
}

type semHolder struct{ s *dlock.PermitSemaphore }

func (h semHolder) acquire(ctx context.Context, _ string) (context.Context, error) {
	return h.s.Acquire(ctx)
}
func (h semHolder) release(hctx context.Context, _ string) error { return h.s.Release(hctx) }
