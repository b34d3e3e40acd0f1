package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The floor scenario: what Redis spends on one uncontended Lock+Unlock
// in each lock layout, measured on the server. One client goroutine
// sends each pair's commands back to back, without pipelining, so that
// the CPU counted is the server's work per pair: its scripts, plus
// reading each request and writing each reply, which every layout pays
// per round trip.

// floorKey is the key every layout locks.
const floorKey = "bench:floor"

// floorWarmPairs are sent before the measured pairs: scripts are loaded
// (the first EVALSHA fails with NOSCRIPT) and connections dialled.
const floorWarmPairs = 1000

// redissonSource is where the Redisson layout's scripts come from: the
// copies in dlock's interop tests (redisson_interop_test.go).
const redissonSource = "redisson/redisson 66863978 (4.7.0 + 62 commits)"

// floorLayout is one way to take and release a lock.
type floorLayout struct {
	id, name string
	sends    string // what one Lock+Unlock sends, for the report
	// open prepares the layout on rdb; pair takes the lock and releases
	// it once.
	open func(rdb *redis.Client) (pair func(context.Context) error, close func(), err error)
}

var floorLayouts = []floorLayout{
	{
		id: "redisson", name: "Redisson scripts",
		sends: "RLock's acquire script (`RedissonLock.tryLockInnerAsync`: hash field `uuid:threadId`, `hincrby`, `pexpire`); " +
			"its unlock script (`RedissonBaseLock.unlockInnerAsync`: unlock latch, `hincrby -1`, `del`, `publish`, latch `set px`), then `DEL` of the latch " +
			"(Redisson does not wait for that reply; the bench does)",
		open: openRedissonFloor,
	},
	{
		id: "dlock", name: "dlock Mutex scripts",
		sends: "`Mutex.Lock` and `Mutex.Unlock` (watchdog lease), through the public API on a default go-redis client",
		open:  openDlockFloor,
	},
	{
		id: "setnx", name: "SET NX + release script",
		sends: "`SET key token NX PX 30000`; a compare-and-delete script (`get` = token: `del`), as bsm/redislock releases",
		open:  openSetNXFloor,
	},
}

func floorLayoutByID(id string) (floorLayout, error) {
	for _, l := range floorLayouts {
		if l.id == id {
			return l, nil
		}
	}
	return floorLayout{}, fmt.Errorf("bench: unknown floor layout %q", id)
}

// Redisson's RLock scripts, as redisson_interop_test.go plays them.
var (
	// KEYS: lock. ARGV: lease, owner. nil when acquired, else the pttl.
	redissonAcquire = redis.NewScript(`
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);`)

	// KEYS: lock, channel, latch. ARGV: message 0, lease, owner, publish
	// command, latch lifetime.
	redissonUnlock = redis.NewScript(`
local val = redis.call('get', KEYS[3]);
if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;`)
)

// Redisson's defaults: the watchdog lease, and the unlock latch's
// lifetime, (timeout + retry delay) × retry attempts.
const (
	redissonLease    = 30000
	redissonLatchTTL = 16500
)

// openRedissonFloor plays one Redisson thread: acquire, unlock with a
// fresh latch, then DEL the latch as RedissonBaseLock does once the
// reply is in.
func openRedissonFloor(rdb *redis.Client) (func(context.Context) error, func(), error) {
	owner := rand.Text() + ":1"
	channel := "redisson_lock__channel:{" + floorKey + "}"
	pair := func(ctx context.Context) error {
		if err := redissonAcquire.Run(ctx, rdb, []string{floorKey}, redissonLease, owner).Err(); !errors.Is(err, redis.Nil) {
			return fmt.Errorf("acquire: %w (want nil: acquired)", err)
		}
		var id [16]byte
		_, _ = rand.Read(id[:])
		latch := "redisson_unlock_latch:{" + floorKey + "}:" + hex.EncodeToString(id[:])
		n, err := redissonUnlock.Run(ctx, rdb, []string{floorKey, channel, latch}, 0, redissonLease, owner, "publish", redissonLatchTTL).Int()
		if err != nil || n != 1 {
			return fmt.Errorf("unlock: %d, %w", n, err)
		}
		return rdb.Del(ctx, latch).Err()
	}
	return pair, func() {}, nil
}

// openDlockFloor locks and unlocks a dlock Mutex with the watchdog lease.
func openDlockFloor(rdb *redis.Client) (func(context.Context) error, func(), error) {
	c, err := dlock.New(rdb)
	if err != nil {
		return nil, nil, err
	}
	m, err := c.NewMutex(floorKey)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	pair := func(ctx context.Context) error {
		lockCtx, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return m.Unlock(lockCtx)
	}
	return pair, func() { _ = c.Close() }, nil
}

// setNXRelease deletes KEYS[1] if it holds ARGV[1], the token.
var setNXRelease = redis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0`)

// openSetNXFloor takes the lock with SET NX PX and a fresh token, and
// releases it with the compare-and-delete script.
func openSetNXFloor(rdb *redis.Client) (func(context.Context) error, func(), error) {
	pair := func(ctx context.Context) error {
		token := rand.Text()
		ok, err := rdb.SetNX(ctx, floorKey, token, peerTTL).Result()
		if err != nil || !ok {
			return fmt.Errorf("SET NX: %v, %w", ok, err)
		}
		n, err := setNXRelease.Run(ctx, rdb, []string{floorKey}, token).Int()
		if err != nil || n != 1 {
			return fmt.Errorf("release: %d, %w", n, err)
		}
		return nil
	}
	return pair, func() {}, nil
}

// floorRun is one worker's measurement of one layout.
type floorRun struct {
	Pairs      int
	RoundTrips int64 // counted by the go-redis hook
	Executed   int64 // every command Redis ran, script-internal ones included
	RedisCPU   time.Duration
	ClientCPU  time.Duration
	Elapsed    time.Duration
}

// floorWorker sends floorWarmPairs and then j.Pairs Lock+Unlock pairs of
// layout j.Lib back to back, and measures the second lot.
func floorWorker(j job) (*floorRun, error) {
	l, err := floorLayoutByID(j.Lib)
	if err != nil {
		return nil, err
	}
	rdb, rt := newRDB(j.Addr)
	defer rdb.Close()
	admin := redis.NewClient(&redis.Options{Addr: j.Addr})
	defer admin.Close()
	pair, closeLayout, err := l.open(rdb)
	if err != nil {
		return nil, err
	}
	defer closeLayout()
	ctx := context.Background()
	if err := repeat(ctx, pair, floorWarmPairs); err != nil {
		return nil, err
	}
	s0, err := sampleServer(ctx, admin)
	if err != nil {
		return nil, err
	}
	cpu0, rt0, start := cpuTime(), rt.n.Load(), monoNow()
	if err := repeat(ctx, pair, j.Pairs); err != nil {
		return nil, err
	}
	run := &floorRun{Pairs: j.Pairs, Elapsed: time.Duration(monoNow() - start), ClientCPU: cpuTime() - cpu0, RoundTrips: rt.n.Load() - rt0}
	s1, err := sampleServer(ctx, admin)
	if err != nil {
		return nil, err
	}
	d := s1.delta(s0)
	run.Executed, run.RedisCPU = d.total, d.cpu
	return run, nil
}

// repeat calls pair n times, stopping at the first error.
func repeat(ctx context.Context, pair func(context.Context) error, n int) error {
	for i := range n {
		if err := pair(ctx); err != nil {
			return fmt.Errorf("bench: pair %d: %w", i, err)
		}
	}
	return nil
}

// runFloor measures one layout in one worker process on a fresh
// redis-server.
func runFloor(cfg config, l floorLayout) (*floorRun, error) {
	srv, err := startRedis()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	run := &floorRun{}
	j := job{Mode: "floor", Lib: l.id, Addr: srv.Addr(), Pairs: cfg.floorPairs}
	if _, err := runOn(cfg.hang, []string{srv.Addr()}, []job{j}, []any{run}); err != nil {
		return nil, err
	}
	return run, nil
}

// floorResult is one layout's rounds.
type floorResult struct {
	Layout string
	Runs   []*floorRun // the rounds that gave a result
	// Failed is why a round gave no result ("" when every one did).
	Failed string
}

// perPair returns f of every run, per pair, sorted.
func (r *floorResult) perPair(f func(*floorRun) float64) []float64 {
	var vs []float64
	for _, x := range r.Runs {
		vs = append(vs, f(x)/float64(x.Pairs))
	}
	slices.Sort(vs)
	return vs
}

// median is the middle of sorted vs (the lower of the two middle ones),
// NaN without values.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return nan
	}
	return vs[(len(vs)-1)/2]
}

func (r *floorResult) redisCPU() []float64 {
	return r.perPair(func(x *floorRun) float64 { return float64(x.RedisCPU) })
}

// runFloors runs every layout cfg.floorRounds times, in alternating
// order.
func (r *report) runFloors() {
	cfg := r.cfg
	byID := map[string]*floorResult{}
	for _, l := range floorLayouts {
		byID[l.id] = &floorResult{Layout: l.id}
		r.floor = append(r.floor, byID[l.id])
	}
	for round := range cfg.floorRounds {
		order := slices.Clone(floorLayouts)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, l := range order {
			progress("floor        %-15s %d pairs, round %d", l.id, cfg.floorPairs, round+1)
			res := byID[l.id]
			run, err := runFloor(cfg, l)
			if err != nil {
				res.Failed = cmp.Or(res.Failed, failedRound(err, round, cfg.floorRounds))
				continue
			}
			res.Runs = append(res.Runs, run)
		}
	}
}

func (r *report) writeFloor(w writer) {
	if len(r.floor) == 0 {
		return
	}
	cfg := r.cfg
	w("## Redis cost of the lock layout\n\n")
	w("Redis CPU per uncontended Lock+Unlock, measured on the server: for each layout and round a fresh `redis-server` and a worker process whose one goroutine sends "+
		"%d pairs back to back (no pipelining: each command waits for the previous reply) after %d warm-up pairs; median of %d rounds, and the range. "+
		"Redis CPU is the `used_cpu_user + used_cpu_sys` delta over the pairs, so it includes reading each request and writing its reply (the same per round trip for every layout); "+
		"client CPU is the worker's `getrusage`. Scripts go as `EVALSHA`. Redisson's scripts are those of %s, the copies dlock's interop tests run against dlock.\n\n",
		cfg.floorPairs, floorWarmPairs, cfg.floorRounds, redissonSource)
	t := newTable("layout", "configuration")
	for _, l := range floorLayouts {
		t.row(l.name, l.sends)
	}
	w("%s\n", t)
	t = newTable("layout", "round trips/pair", "executed/pair", "Redis CPU/pair", "range", "÷ Redisson scripts", "÷ SET NX", "client CPU/pair", "pairs/s")
	base := func(id string) float64 {
		for _, x := range r.floor {
			if x.Layout == id {
				return median(x.redisCPU())
			}
		}
		return nan
	}
	redisson, setnx := base("redisson"), base("setnx")
	for _, x := range r.floor {
		name := floorName(x.Layout)
		if len(x.Runs) == 0 {
			t.noResult(libCell(name, x.Failed, 0, ""))
			continue
		}
		cpu := x.redisCPU()
		vsRedisson := "–"
		if x.Layout != "redisson" {
			vsRedisson = ratio(median(cpu), redisson)
		}
		vsSetNX := "–"
		if x.Layout != "setnx" {
			vsSetNX = ratio(median(cpu), setnx)
		}
		t.row(libCell(name, x.Failed, 0, ""),
			f2(median(x.perPair(func(x *floorRun) float64 { return float64(x.RoundTrips) }))),
			f2(median(x.perPair(func(x *floorRun) float64 { return float64(x.Executed) }))),
			fmtNs(median(cpu)), fmtNs(cpu[0])+"–"+fmtNs(cpu[len(cpu)-1]), vsRedisson, vsSetNX,
			fmtNs(median(x.perPair(func(x *floorRun) float64 { return float64(x.ClientCPU) }))),
			fmtRate(1e9/median(x.perPair(func(x *floorRun) float64 { return float64(x.Elapsed) }))))
	}
	w("%s\n", t)
}

// floorName is the table's name for layout id.
func floorName(id string) string {
	l, err := floorLayoutByID(id)
	if err != nil {
		return id
	}
	return l.name
}
