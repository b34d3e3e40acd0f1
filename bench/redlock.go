package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	redsyncpool "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Scenario 6: a lock over several independent servers (the Redlock
// algorithm), dlock's RedLock against redsync, the one Go peer that
// implements it, on the same servers.

// redLease is the lease of the fixed-lease RedLock: redsync's default
// expiry, so that both compute the same validity and node timeouts of the
// same order.
const redLease = 8 * time.Second

// redNodeCounts are the numbers of independent servers of scenario 6.
var redNodeCounts = []int{3, 5}

// redLib is a library configured for a lock over several servers.
type redLib struct {
	id, settings string
	clientCmds   []string // as lib.clientCmds
	open         func(addrs []string) (locker, error)
}

var redLibs = []redLib{
	{
		id:         "dlock",
		settings:   "`NewRedLock(clients, name, WithLease(8s))`, one `Client` (go-redis v9) per server, node timeout 100 ms (the default); an attempt returns once a quorum accepted",
		clientCmds: dlockCmds,
		open:       func(addrs []string) (locker, error) { return openDlockRedLock(addrs, dlock.WithLease(redLease)) },
	},
	{
		id:         "dlock-watchdog",
		settings:   "`NewRedLock(clients, name)`: watchdog lease 30 s renewed on every node (the Lock registers the hold with the first Client's watchdog, the Unlock removes it)",
		clientCmds: dlockCmds,
		open:       func(addrs []string) (locker, error) { return openDlockRedLock(addrs) },
	},
	{
		id:         "redsync",
		settings:   "`redsync.New` with one pool (go-redis v9) per server, `NewMutex` defaults: expiry 8 s, 32 tries, per-node timeout 5 % of the expiry (400 ms); every attempt waits for all nodes (`WithFailFast` off)",
		clientCmds: append([]string{"set"}, scriptCmds...),
		open:       openRedsyncRedLock,
	},
}

func redLibByID(id string) (redLib, error) {
	for _, l := range redLibs {
		if l.id == id {
			return l, nil
		}
	}
	return redLib{}, fmt.Errorf("bench: unknown RedLock library %q", id)
}

// redLocker is a dlock RedLock over one Client per server; the embedded
// dlockLocker keeps a handle per name and holds the first Client.
type redLocker struct {
	*dlockLocker
	rdbs    []*redis.Client
	clients []*dlock.Client
}

func openDlockRedLock(addrs []string, opts ...dlock.LockOption) (locker, error) {
	l := &redLocker{}
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		l.rdbs = append(l.rdbs, rdb)
		c, err := dlock.New(rdb)
		if err != nil {
			l.close()
			return nil, err
		}
		l.clients = append(l.clients, c)
	}
	l.dlockLocker = &dlockLocker{c: l.clients[0], rdb: l.rdbs[0],
		newLock: func(_ *dlock.Client, name string) (dlock.Locker, error) {
			return dlock.NewRedLock(l.clients, name, opts...)
		}}
	return l, nil
}

func (l *redLocker) close() {
	for _, c := range l.clients {
		_ = c.Close()
	}
	for _, rdb := range l.rdbs {
		_ = rdb.Close()
	}
}

// redsyncRedLocker is redsync over one pool per server.
type redsyncRedLocker struct {
	rdbs []*redis.Client
	rs   *redsync.Redsync
}

func openRedsyncRedLock(addrs []string) (locker, error) {
	l := &redsyncRedLocker{}
	pools := make([]redsyncpool.Pool, len(addrs))
	for i, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		l.rdbs = append(l.rdbs, rdb)
		pools[i] = goredis.NewPool(rdb)
	}
	l.rs = redsync.New(pools...)
	return l, nil
}

func (l *redsyncRedLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	// A redsync Mutex must not be shared by concurrent lockers (#30): one
	// per acquisition, with the defaults.
	m := l.rs.NewMutex(name)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := m.UnlockContext(ctx)
		return err
	}, nil
}

func (l *redsyncRedLocker) close() {
	for _, rdb := range l.rdbs {
		_ = rdb.Close()
	}
}

// redlockWorker runs the uncontended loop of scenario 6 on the servers of
// j.Addrs.
func redlockWorker(j job) (*uncontendedWorkerResult, error) {
	l, err := redLibByID(j.Lib)
	if err != nil {
		return nil, err
	}
	lk, err := l.open(j.Addrs)
	if err != nil {
		return nil, err
	}
	defer closeLocker(lk)
	return lockLoop(j, lk, j.Addrs, l.clientCmds)
}

// redlockResult is the best of a library's rounds on some servers at one
// concurrency; the counts and CPU are summed over the servers.
type redlockResult struct {
	Nodes int
	*uncontendedResult
}

// startRedisN starts n independent servers at once.
func startRedisN(n int) ([]*redisServer, error) {
	srvs := make([]*redisServer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { srvs[i], errs[i] = startRedis() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, s := range srvs {
				if s != nil {
					s.stop()
				}
			}
			return nil, fmt.Errorf("bench: server %d of %d: %w", i+1, n, err)
		}
	}
	return srvs, nil
}

// runRedlock measures one library on n fresh servers at one concurrency in
// one worker process.
func runRedlock(cfg config, l redLib, n, goroutines, round int) (*redlockResult, error) {
	srvs, err := startRedisN(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, n)
	for i, s := range srvs {
		addrs[i] = s.addr
		defer s.stop()
	}
	begin := monoNow() + int64(cfg.spawn)
	t0 := begin + int64(cfg.redWarm)
	j := job{Mode: "redlock", Lib: l.id, Addrs: addrs, Goroutines: goroutines,
		Begin: begin, T0: t0, T1: t0 + int64(cfg.redWindow)}
	if cfg.profileDir != "" {
		j.Profile = filepath.Join(cfg.profileDir, fmt.Sprintf("redlock-%s-%d-%d-%d.pprof", l.id, n, goroutines, round))
	}
	w := &uncontendedWorkerResult{}
	if err := runJobs([]job{j}, []any{w}); err != nil {
		return nil, err
	}
	return &redlockResult{Nodes: n, uncontendedResult: w.result(l.id)}, nil
}

// runRedlocks runs scenario 6: every library on 3 and 5 servers at 1 and
// 16 goroutines, cfg.redRounds rounds in alternating library order, and
// keeps each cell's best round.
func (r *report) runRedlocks() error {
	cfg := r.cfg
	best := map[string]*redlockResult{}
	cell := func(id string, n, g int) string { return fmt.Sprintf("%s/%d/%d", id, n, g) }
	for round := range cfg.redRounds {
		order := slices.Clone(cfg.redLibs)
		if round%2 == 1 {
			slices.Reverse(order) // the machine's load drifts: alternate the order
		}
		for _, n := range redNodeCounts {
			for _, l := range order {
				for _, g := range uncontendedGoroutines {
					progress("6 redlock      %-15s servers=%d goroutines=%-2d round %d", l.id, n, g, round+1)
					res, err := runRedlock(cfg, l, n, g, round)
					if err != nil {
						return err
					}
					k := cell(l.id, n, g)
					if b := best[k]; b != nil {
						res.Rounds = append(b.Rounds, res.PerSec)
						if b.PerSec > res.PerSec {
							b.Rounds = res.Rounds
							res = b
						}
					} else {
						res.Rounds = []float64{res.PerSec}
					}
					best[k] = res
				}
			}
		}
	}
	for _, n := range redNodeCounts {
		for _, g := range uncontendedGoroutines {
			for _, l := range cfg.redLibs {
				r.red = append(r.red, best[cell(l.id, n, g)])
			}
		}
	}
	return nil
}

// redCell returns library id's result on n servers at g goroutines.
func (r *report) redCell(id string, n, g int) *redlockResult {
	for _, x := range r.red {
		if x.Lib == id && x.Nodes == n && x.Goroutines == g {
			return x
		}
	}
	return nil
}

func (r *report) writeRedlock(w writer) {
	if len(r.red) == 0 {
		return
	}
	cfg := r.cfg
	w("## 6. RedLock: Lock+Unlock over 3 and 5 independent servers\n\n")
	w("The Redlock algorithm over N independent `redis-server`s (fresh ones for every measurement), dlock's `RedLock` against redsync, the Go peer that implements it, on the same servers. ")
	w("As in scenario 1, each goroutine locks and unlocks its own key in a loop (no contention), in one process: %v measured after %v of warm-up, best of %d rounds run in alternating library order (all rounds' throughput shown). ",
		cfg.redWindow, cfg.redWarm, cfg.redRounds)
	w("Latency is one Lock plus one Unlock. Commands and Redis CPU are summed over the N servers (`INFO commandstats` and `INFO cpu` of each); Redis CPU can therefore pass 100 %%. ")
	w("*÷ redsync* is dlock's value over redsync's at the same servers and goroutines: throughput (higher is better for dlock) and p50 latency (lower is better).\n\n")
	for _, l := range cfg.redLibs {
		w("- **%s**: %s\n", l.id, l.settings)
	}
	w("\n")
	for _, n := range redNodeCounts {
		t := newTable("library", "goroutines", "Lock+Unlock/s", "p50", "p99", "cmds sent/op", "executed/op", "Redis CPU", "client CPU", "rounds (/s)", "/s ÷ redsync", "p50 ÷ redsync")
		rows := 0
		for _, g := range uncontendedGoroutines {
			peer := r.redCell("redsync", n, g)
			for _, l := range cfg.redLibs {
				x := r.redCell(l.id, n, g)
				if x == nil {
					continue
				}
				rows++
				rounds := make([]string, len(x.Rounds))
				for i, v := range x.Rounds {
					rounds[i] = fmtRate(v)
				}
				qRate, qP50 := "–", "–"
				if peer != nil && x != peer {
					qRate = ratio(x.PerSec, peer.PerSec)
					qP50 = ratio(float64(x.Latency.P50), float64(peer.Latency.P50))
				}
				t.row(x.Lib+errNote(x.Errors, x.FirstError), fmt.Sprint(g), fmtRate(x.PerSec), fmtDur(x.Latency.P50), fmtDur(x.Latency.P99),
					f2(x.ClientPerOp), f2(x.TotalPerOp), pct(x.RedisCPU, x.Window), pct(x.ClientCPU, x.Window), strings.Join(rounds, ", "), qRate, qP50)
			}
		}
		if rows > 0 {
			w("**%d servers** (quorum %d)\n\n%s\n", n, n/2+1, t)
		}
	}
	// Where the difference comes from, at the concurrency where CPU sets
	// the throughput.
	g := uncontendedGoroutines[len(uncontendedGoroutines)-1]
	var notes []string
	for _, n := range redNodeCounts {
		d, p := r.redCell("dlock", n, g), r.redCell("redsync", n, g)
		if d == nil || p == nil || d.PerSec == 0 || p.PerSec == 0 {
			continue
		}
		ops := func(x *redlockResult) float64 { return x.PerSec * x.Window.Seconds() }
		notes = append(notes, fmt.Sprintf("on %d servers dlock executed %.1f commands per server per Lock+Unlock against redsync's %.1f, and used %.1f µs of Redis CPU (all servers) and %.1f µs of client CPU per Lock+Unlock against redsync's %.1f µs and %.1f µs",
			n, d.TotalPerOp/float64(n), p.TotalPerOp/float64(n), cpuPerOp(d.RedisCPU, ops(d)), cpuPerOp(d.ClientCPU, ops(d)), cpuPerOp(p.RedisCPU, ops(p)), cpuPerOp(p.ClientCPU, ops(p))))
	}
	if len(notes) > 0 {
		w("At %d goroutines %s. Both send one command per server to lock and one to unlock; ", g, strings.Join(notes, "; "))
		w("on each server dlock runs the Mutex's scripts, Redisson's hash plus the request latches that make a re-sent script harmless (see scenario 1 and the analysis above), where redsync runs `SET NX PX` and a compare-and-delete. ")
		w("dlock's acquisition returns as soon as a quorum has accepted; redsync's waits for every server.\n\n")
	}
}

// writeRedlockSummary is scenario 6 in one table for the top of the
// report: dlock's fixed-lease RedLock over redsync.
func (r *report) writeRedlockSummary(w writer) {
	t := newTable("RedLock (issue 4): dlock `WithLease(8s)` vs redsync", "dlock p50", "redsync p50", "p50 ÷ redsync", "/s ÷ redsync")
	rows := 0
	for _, n := range redNodeCounts {
		for _, g := range uncontendedGoroutines {
			d, p := r.redCell("dlock", n, g), r.redCell("redsync", n, g)
			if d == nil || p == nil {
				continue
			}
			rows++
			t.row(fmt.Sprintf("Lock+Unlock, %d servers, %d goroutine(s)", n, g), fmtDur(d.Latency.P50), fmtDur(p.Latency.P50),
				ratio(float64(d.Latency.P50), float64(p.Latency.P50)), ratio(d.PerSec, p.PerSec))
		}
	}
	if rows > 0 {
		w("Issue 4 sets no number for RedLock; this is how it compares with redsync on the same servers (scenario 6):\n\n%s\n", t)
	}
}
