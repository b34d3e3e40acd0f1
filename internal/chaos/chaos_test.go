package chaos

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// contention is the workload of the fault scenarios: 3 processes with 4
// owners each, short critical sections, some work between acquisitions.
func contention(perOwner int) workerConfig {
	return workerConfig{
		Goroutines: 4, Acquisitions: perOwner,
		Watchdog: time.Second, Critical: 200 * time.Microsecond, Outside: time.Millisecond,
		Fenced: true,
	}
}

func TestNoFaults(t *testing.T) {
	run(t, scenario{name: "no faults", procs: 3, worker: contention(scale(50, 3000))})
}

// TestDeadlockDetection runs the contention with deadlock detection on
// (a check every 20 ms) and every owner waiting while it holds a lock of
// its own, so that its waits are recorded and checked, and the scripts
// flushed every 5 ms: no Lock may fail with ErrDeadlock (one lock has no
// cycle), and mutual exclusion holds as without detection.
func TestDeadlockDetection(t *testing.T) {
	w := contention(scale(50, 3000))
	w.Deadlocks = 20 * time.Millisecond
	run(t, scenario{name: "deadlock detection on, SCRIPT FLUSH loop", procs: 3, worker: w,
		fault: func(ctx context.Context, _ *testing.T, lock *redistest.Server) int { return flushScripts(ctx, lock) }})
}

// TestNegativeControl runs with a fixed lease shorter than the critical
// section: holders overlap, and the checker must say so.
func TestNegativeControl(t *testing.T) {
	w := workerConfig{Goroutines: 2, Acquisitions: scale(8, 50), Lease: 20 * time.Millisecond, Critical: 50 * time.Millisecond, Watchdog: time.Second, IgnoreLost: true}
	run(t, scenario{name: "negative control (lease < work)", procs: 2, worker: w, broken: true})
}

// TestPubSubKills kills every subscription connection of the lock's Redis
// every 20 ms. Unlock messages published while a waiter's connection is
// down are lost; the resubscription after the reconnect must wake the
// waiters (internal/pubsub), or they sleep until the holder's lease runs
// out. The lease is long here (the watchdog's 10 s) so that a lost wake-up
// shows: the longest wait must stay well below it, and some connections
// must actually have been killed, or the run tested nothing.
func TestPubSubKills(t *testing.T) {
	const lease = 10 * time.Second
	// One owner per process, holding for a while and then staying away
	// from the lock for longer: the lock is often free, and a waiter
	// that missed the unlock message is not soon saved by the next one.
	w := workerConfig{Goroutines: 1, Acquisitions: scale(20, 300), Watchdog: lease,
		Critical: 50 * time.Millisecond, Outside: 300 * time.Millisecond, Fenced: true}
	var killed atomic.Int64
	run(t, scenario{name: "pub/sub connections killed", procs: 3, worker: w,
		fault: func(ctx context.Context, _ *testing.T, lock *redistest.Server) int {
			rdb := lock.Client()
			defer rdb.Close()
			return every(ctx, 5*time.Millisecond, func() error {
				n, err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int64()
				killed.Add(n)
				return err
			})
		},
		check: func(t *testing.T, o *outcome) {
			o.notes = append(o.notes, fmt.Sprintf("%d subscription connections killed, watchdog %v", killed.Load(), lease))
			if killed.Load() == 0 {
				t.Error("no subscription connection was killed: the run tested nothing")
			}
			if o.maxWait > lease/10 {
				t.Errorf("longest wait %v, lease %v: a waiter slept through a lost unlock message", o.maxWait, lease)
			}
		}})
}

func TestScriptFlushLoop(t *testing.T) {
	run(t, scenario{name: "SCRIPT FLUSH loop", procs: 3, worker: contention(scale(50, 3000)),
		fault: func(ctx context.Context, t *testing.T, lock *redistest.Server) int {
			rdb := lock.Client()
			defer rdb.Close()
			return every(ctx, 5*time.Millisecond, func() error { return rdb.ScriptFlush(ctx).Err() })
		}})
}

// TestRedisRestart kills and restarts the lock's Redis under contention.
// It persists every write (appendfsync always), so locks survive the
// restart; clients see errors while it is down and carry on. Each outage
// lasts a quarter of a second or more, and the workers' go-redis clients
// do not retry (they would absorb outages of up to about 2 s), so Unlocks
// and the give-backs of attempts whose reply was lost fail; dlock sends
// them again in the background, so that a lock is free soon after Redis
// is back, not a lease (10 s here) later. The test watches the lock's
// hash: no owner's field may stay in it for more than maxStuck beyond the
// outages it spans (holds last well under a millisecond).
func TestRedisRestart(t *testing.T) {
	// maxStuck: a release that failed waits for the Client's probe (10
	// to 100 ms apart) and goes as soon as Redis answers through the
	// pool. A pool whose dial breaker tripped (see lockClient's
	// PoolSize) would refuse for up to a second more; a lost release
	// would keep the lock for the lease.
	const lease, down, maxStuck = 10 * time.Second, 250 * time.Millisecond, 500 * time.Millisecond
	w := contention(scale(250, 3000))
	w.Watchdog, w.NoRetries = lease, true
	name := "chaos:Redis restarted (AOF always)"
	var (
		mu      sync.Mutex
		outages [][2]int64 // kill to loaded, in history.Now() time
		fields  [][2]int64 // first and last time each owner's field was seen
	)
	run(t, scenario{name: "Redis restarted (AOF always)", procs: 3, worker: w,
		lockArgs: []string{"--appendonly", "yes", "--appendfsync", "always"},
		fault: func(ctx context.Context, _ *testing.T, lock *redistest.Server) int {
			rdb := lock.Client()
			defer rdb.Close()
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				f := watchFields(ctx, lock, name)
				mu.Lock()
				fields = f
				mu.Unlock()
			}()
			defer func() { <-watched }()
			return every(ctx, 2*time.Second, func() error {
				start := history.Now()
				lock.Kill()
				// Down for longer than go-redis's own retries of a
				// command would last with its default options.
				time.Sleep(down)
				if err := lock.Restart(); err != nil {
					return err
				}
				err := awaitLoaded(ctx, rdb)
				mu.Lock()
				outages = append(outages, [2]int64{start, history.Now()})
				mu.Unlock()
				return err
			})
		},
		check: func(t *testing.T, o *outcome) {
			mu.Lock()
			defer mu.Unlock()
			if len(outages) == 0 {
				t.Error("Redis was never restarted: the run tested nothing")
				return
			}
			var longest, sum time.Duration
			for _, s := range outages {
				d := time.Duration(s[1] - s[0])
				longest, sum = max(longest, d), sum+d
			}
			var stuck, stuckSpan time.Duration
			for _, f := range fields {
				if up := time.Duration(f[1]-f[0]) - downDuring(outages, f[0], f[1]); up > stuck {
					stuck, stuckSpan = up, time.Duration(f[1]-f[0])
				}
			}
			var worstUp time.Duration
			for _, h := range o.holds {
				worstUp = max(worstUp, time.Duration(h.Wait)-downDuring(outages, h.Acquired-h.Wait, h.Acquired))
			}
			o.notes = append(o.notes, fmt.Sprintf("watchdog %v; %d outages (kill to loaded) mean %v, longest %v; "+
				"longest wait less the outages in it %v; longest an owner stayed in the lock, less outages, %v",
				lease, len(outages), (sum/time.Duration(len(outages))).Round(time.Millisecond), longest.Round(time.Millisecond),
				worstUp.Round(time.Millisecond), stuck.Round(time.Millisecond)))
			t.Logf("%d owners' fields seen; the longest stayed %v, %v of it with Redis up", len(fields), stuckSpan, stuck)
			if len(fields) == 0 {
				t.Error("no owner's field was seen in the lock: the watch tested nothing")
			}
			if stuck > maxStuck {
				t.Errorf("an owner's field stayed in the lock %v while Redis was up: a release was lost to an outage", stuck)
			}
		}})
}

// watchFields polls the hash of the lock name until ctx ends and returns,
// for each owner's field it saw, when it saw it first and last (errors,
// such as while Redis is down, are skipped).
func watchFields(ctx context.Context, srv *redistest.Server, name string) [][2]int64 {
	rdb := srv.Client()
	defer rdb.Close()
	seen := map[string]*[2]int64{}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			var spans [][2]int64
			for _, s := range seen {
				spans = append(spans, *s)
			}
			return spans
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		m, err := rdb.HGetAll(qctx, name).Result()
		cancel()
		if err != nil {
			continue
		}
		now := history.Now()
		for f := range m {
			if s := seen[f]; s != nil {
				s[1] = now
			} else {
				seen[f] = &[2]int64{now, now}
			}
		}
	}
}

// downDuring is how long the outages overlap [from, to].
func downDuring(outages [][2]int64, from, to int64) time.Duration {
	var d int64
	for _, s := range outages {
		if lo, hi := max(s[0], from), min(s[1], to); hi > lo {
			d += hi - lo
		}
	}
	return time.Duration(d)
}

// awaitLoaded waits until the server answers PING without LOADING.
func awaitLoaded(ctx context.Context, rdb *redis.Client) error {
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLatency(t *testing.T) {
	run(t, scenario{name: "2 ms latency each way (proxy)", procs: 3, worker: contention(scale(25, 1000)), latency: 2 * time.Millisecond})
}

// TestPausedHolder freezes a holder (SIGSTOP) past its lease. Another
// client takes the lock and writes the fenced register; when the frozen
// holder resumes, its lock context must be cancelled with ErrLockLost and
// its write with the stale token rejected.
func TestPausedHolder(t *testing.T) {
	e := newEnv(t, nil, 0)
	cfg := workerConfig{LockAddr: e.lockAddr, ResourceAddr: e.resource.Addr(), Name: "chaos:paused",
		Watchdog: 300 * time.Millisecond, Fenced: true, Pause: true}
	resume, resumed := io.Pipe()
	defer resumed.Close()
	cmd, out := startWorkerWith(t, cfg, resume)
	eventually(t, 10*time.Second, func() bool { return strings.Contains(out.String(), "held") })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// Meanwhile another client waits out the frozen holder's lease.
	ctx := context.Background()
	rdb := e.lock.Client()
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	m, _ := locks.NewMutex(cfg.Name, dlock.WithFencing())
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lctx, err := m.Lock(wctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second client acquired %v after the freeze", time.Since(start))
	res := e.resource.Client()
	defer res.Close()
	if err := dlock.FencedSet(ctx, res, dlock.FenceOf(lctx), fenceKey, "new holder", 0); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(resumed, "resumed\n"); err != nil {
		t.Fatal(err)
	}
	resumed.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(strings.TrimPrefix(out.String(), "held\n"))
	if want := "cancelled=true lost=true accepted=false unlock=dlock: lock not held by this owner: \"chaos:paused\""; !strings.HasPrefix(got, want) {
		t.Errorf("frozen holder reported %q, want %q", got, want)
	}
	addRow(row{"holder frozen past its lease (SIGSTOP)", 2, 0, time.Since(start).Round(time.Millisecond).String(), 1,
		"stale fenced write rejected; holder told on resume"})
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
	}
}
