package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/go-redsync/redsync/v4"
	redsyncpool "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// The RedLock scenario: a lock over several independent servers, dlock's
// RedLock against redsync on the same servers.

// redLease is the lease of the fixed-lease RedLock: redsync's default
// expiry.
const redLease = 8 * time.Second

// redNodeCounts are the numbers of independent servers.
var redNodeCounts = []int{3, 5}

// redLib is a library configured for a lock over several servers.
type redLib struct {
	id, settings string
	open         func(addrs []string) (locker, error)
}

var redLibs = []redLib{
	{
		id:       "dlock",
		settings: "`NewRedLock(clients, name, WithLease(8s))`, one `Client` per server, node timeout 100 ms (default)",
		open:     func(addrs []string) (locker, error) { return openDlockRedLock(addrs, dlock.WithLease(redLease)) },
	},
	{
		id:       "dlock-watchdog",
		settings: "`NewRedLock(clients, name)`: watchdog lease 30 s",
		open:     func(addrs []string) (locker, error) { return openDlockRedLock(addrs) },
	},
	{
		id:       "redsync",
		settings: "`redsync.New` with one pool per server, `NewMutex` defaults (expiry 8 s, 32 tries)",
		open:     openRedsyncRedLock,
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

// openDlockRedLock opens one Client per server; the RedLock handles are
// kept per name as for a Mutex.
func openDlockRedLock(addrs []string, opts ...dlock.LockOption) (locker, error) {
	l := &dlockLocker{}
	for _, a := range addrs {
		rdb, rt := newRDB(a)
		l.rdbs, l.rts = append(l.rdbs, rdb), append(l.rts, rt)
		c, err := dlock.New(rdb)
		if err != nil {
			l.close()
			return nil, err
		}
		l.clients = append(l.clients, c)
	}
	l.c = l.clients[0]
	l.newLock = func(_ *dlock.Client, name string) (dlock.Locker, error) {
		return dlock.NewRedLock(l.clients, name, opts...)
	}
	return l, nil
}

// redsyncRedLocker is redsync over one pool per server.
type redsyncRedLocker struct {
	rdbs []*redis.Client
	rts  []*counter
	rs   *redsync.Redsync
}

func openRedsyncRedLock(addrs []string) (locker, error) {
	l := &redsyncRedLocker{}
	pools := make([]redsyncpool.Pool, len(addrs))
	for i, a := range addrs {
		rdb, rt := newRDB(a)
		l.rdbs, l.rts = append(l.rdbs, rdb), append(l.rts, rt)
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

func (l *redsyncRedLocker) roundTrips() int64 { return sumCounters(l.rts) }

func (l *redsyncRedLocker) close() {
	for _, rdb := range l.rdbs {
		_ = rdb.Close()
	}
}

// redlockWorker runs the uncontended loop on the servers of j.Addrs.
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
	return lockLoop(j, lk, j.Addrs)
}

// redlockResult is the best of a library's rounds on some servers at one
// concurrency; counts, CPU and footprint are summed over the servers.
type redlockResult struct {
	Nodes int
	*uncontendedResult
}

// runRedlock measures one library on n fresh servers at one concurrency in
// one worker process.
func runRedlock(cfg config, l redLib, n, goroutines, round int) (*uncontendedResult, error) {
	srvs, err := redisserver.StartMany(n, func(int) (*redisserver.Server, error) { return startRedis() })
	if err != nil {
		return nil, err
	}
	defer redisserver.CloseAll(srvs)
	addrs := make([]string, n)
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	begin := monoNow() + int64(cfg.spawn)
	t0 := begin + int64(cfg.redWarm)
	j := job{Mode: "redlock", Lib: l.id, Addrs: addrs, Goroutines: goroutines,
		Begin: begin, T0: t0, T1: t0 + int64(cfg.redWindow)}
	if cfg.profileDir != "" {
		j.Profile = filepath.Join(cfg.profileDir, fmt.Sprintf("redlock-%s-%d-%d-%d.pprof", l.id, n, goroutines, round))
	}
	w := &uncontendedWorkerResult{}
	left, err := runOn(cfg.hang, addrs, []job{j}, []any{w})
	if err != nil {
		return nil, err
	}
	return w.result(l.id, left), nil
}

// runRedlocks runs every library on 3 and 5 servers at each concurrency,
// cfg.redRounds rounds in alternating library order, and keeps each
// cell's best round.
func (r *report) runRedlocks() {
	cfg := r.cfg
	best := map[string]*uncontendedResult{}
	cell := func(id string, n, g int) string { return fmt.Sprintf("%s/%d/%d", id, n, g) }
	for round := range cfg.redRounds {
		order := slices.Clone(cfg.redLibs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range redNodeCounts {
			for _, l := range order {
				for _, g := range uncontendedGoroutines {
					progress("redlock      %-15s servers=%d goroutines=%-2d round %d", l.id, n, g, round+1)
					res, err := runRedlock(cfg, l, n, g, round)
					if err != nil {
						res = &uncontendedResult{Lib: l.id, Goroutines: g, Failed: failedRound(err, round, cfg.redRounds)}
					}
					best[cell(l.id, n, g)] = keepBest(best[cell(l.id, n, g)], res)
				}
			}
		}
	}
	for _, n := range redNodeCounts {
		for _, g := range uncontendedGoroutines {
			for _, l := range cfg.redLibs {
				if b := best[cell(l.id, n, g)]; b != nil {
					r.red = append(r.red, &redlockResult{Nodes: n, uncontendedResult: b})
				}
			}
		}
	}
}
