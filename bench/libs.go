package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// locker is the one operation every library is measured on: wait for a
// lock and later release it.
type locker interface {
	// lock waits for the lock called name until ctx ends and returns the
	// function that releases it. ctx must stay alive until then
	// (rueidislock releases a lock whose ctx ends).
	lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	// roundTrips is the number of commands and pipelines the library's
	// client has sent so far, counted by a hook on the client.
	roundTrips() int64
	close()
}

// lib is one library, configured as a user would configure it.
type lib struct {
	id       string // stable name used in flags, jobs and tables
	settings string // its configuration, for the report
	// open connects to Redis. A renewal > 0 asks for locks whose lease is
	// kept alive every renewal/3 with a lease of renewal (the watchdog
	// scenario); the libraries without a watchdog get the refresh
	// goroutine per lock their READMEs suggest.
	open func(addr string, renewal time.Duration) (locker, error)
	// redisKey is the key that holds the lock called name.
	redisKey func(name string) string
	// hook says how roundTrips counts.
	hook string
}

// Lease of the fixed-lease locks: dlock's watchdog lease, longer than any
// hold in the bench.
const peerTTL = 30 * time.Second

const (
	goredisHook = "go-redis hook (Process and ProcessPipeline calls)"
	rueidisHook = "rueidis.Client wrapper (Do and DoMulti calls)"
)

var libs = []lib{
	{
		id:       "dlock",
		settings: "`Mutex`, watchdog lease (30 s)",
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlock(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewMutex(name) })
		},
	},
	{
		id:       "dlock-lease",
		settings: "`Mutex` with `WithLease(30s)`",
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlock(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) {
				return c.NewMutex(name, dlock.WithLease(peerTTL))
			})
		},
	},
	{
		id:       "dlock-ctx",
		settings: "`Mutex`, watchdog lease (30 s), go-redis `ContextTimeoutEnabled`",
		open: func(addr string, r time.Duration) (locker, error) {
			rdb, rt := newRDBWith(addr, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
			return openDlockOn(rdb, rt, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewMutex(name) })
		},
	},
	{
		id:       "dlock-rueidis",
		settings: "`Mutex` on rueidis (dlockrueidis), watchdog lease (30 s)",
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlockRueidis(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewMutex(name) })
		},
		hook: rueidisHook,
	},
	{
		id:       "dlock-fair",
		settings: "`FairMutex`, watchdog lease (30 s)",
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlock(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewFairMutex(name) })
		},
	},
	{
		id:       "dlock-fair-rueidis",
		settings: "`FairMutex` on rueidis (dlockrueidis), watchdog lease (30 s)",
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlockRueidis(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewFairMutex(name) })
		},
		hook: rueidisHook,
	},
	{
		id:       "dlock-deadlock",
		settings: "`Mutex`, watchdog lease (30 s), `WithDeadlockDetection(20ms)`, each waiter holding a lock of its own",
		open:     openDlockDeadlock,
	},
	{
		id:       "dlock-spin",
		settings: "`SpinLock` (no pub/sub; backoff 1 ms doubling to 128 ms), watchdog lease (30 s)",
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlock(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewSpinLock(name) })
		},
	},
	{
		id:       "redsync",
		settings: "one pool (go-redis v9), expiry 30 s, default retry delay rand(50–250 ms), tries unlimited",
		open:     openRedsync,
	},
	{
		id:       "redislock-1ms",
		settings: "`Obtain` with `LinearBackoff(1 ms)`, TTL 30 s",
		open:     func(addr string, r time.Duration) (locker, error) { return openRedislock(addr, r, time.Millisecond) },
	},
	{
		id:       "redislock-10ms",
		settings: "`Obtain` with `LinearBackoff(10 ms)`, TTL 30 s",
		open:     func(addr string, r time.Duration) (locker, error) { return openRedislock(addr, r, 10*time.Millisecond) },
	},
	{
		id:       "rueidislock",
		settings: "`KeyMajority` 1, `NoLoopTracking`, validity 5 s auto-extended, client-side-caching wake-up",
		open:     openRueidislock,
		redisKey: func(name string) string { return "rueidislock:0:" + name },
		hook:     rueidisHook,
	},
}

func libByID(id string) (lib, error) {
	for _, l := range libs {
		if l.id == id {
			if l.redisKey == nil {
				l.redisKey = func(name string) string { return name }
			}
			if l.hook == "" {
				l.hook = goredisHook
			}
			return l, nil
		}
	}
	return lib{}, fmt.Errorf("bench: unknown library %q", id)
}

// closeLocker closes lk, giving up after 10 s: a library that hung
// releasing locks may hang closing too, and the worker must still report.
func closeLocker(lk locker) {
	done := make(chan struct{})
	go func() { lk.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// counter is a go-redis hook that counts round trips: every command
// processed on its own and every pipeline counts one.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// newRDB returns a default go-redis client for addr with a round-trip
// counter hooked in.
func newRDB(addr string) (*redis.Client, *counter) { return newRDBWith(addr, nil) }

// newRDBWith is newRDB with options changed by set, if not nil.
func newRDBWith(addr string, set func(*redis.Options)) (*redis.Client, *counter) {
	opt := &redis.Options{Addr: addr}
	if set != nil {
		set(opt)
	}
	rdb := redis.NewClient(opt)
	c := &counter{}
	rdb.AddHook(c)
	return rdb, c
}

// dlock

type dlockLocker struct {
	rdbs    []*redis.Client
	rts     []*counter
	c       *dlock.Client
	clients []*dlock.Client
	newLock func(c *dlock.Client, name string) (dlock.Locker, error)
	handles sync.Map // name -> dlock.Locker: a handle per name, as an application keeps them
	// Locks found lost at their unlock, by their local deadline and found
	// gone by a renewal.
	lostDeadline, lostGone atomic.Int64
}

func (l *dlockLocker) losses() (deadline, gone int64) {
	return l.lostDeadline.Load(), l.lostGone.Load()
}

// countLoss counts the loss of a lock whose context ended with cause.
func (l *dlockLocker) countLoss(cause error) {
	switch {
	case !errors.Is(cause, dlock.ErrLockLost):
	case strings.Contains(cause.Error(), "ran out"):
		l.lostDeadline.Add(1)
	default:
		l.lostGone.Add(1)
	}
}

func openDlock(addr string, renewal time.Duration, newLock func(c *dlock.Client, name string) (dlock.Locker, error)) (locker, error) {
	rdb, rt := newRDB(addr)
	return openDlockOn(rdb, rt, renewal, newLock)
}

// openDlockOn is openDlock on a go-redis client of the caller's and its
// round-trip counter.
func openDlockOn(rdb *redis.Client, rt *counter, renewal time.Duration, newLock func(c *dlock.Client, name string) (dlock.Locker, error)) (locker, error) {
	var opts []dlock.Option
	if renewal > 0 {
		opts = append(opts, dlock.WithWatchdogTimeout(renewal))
	}
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &dlockLocker{rdbs: []*redis.Client{rdb}, rts: []*counter{rt}, c: c, clients: []*dlock.Client{c}, newLock: newLock}, nil
}

func (l *dlockLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	h, ok := l.handles.Load(name)
	if !ok {
		m, err := l.newLock(l.c, name)
		if err != nil {
			return nil, err
		}
		h, _ = l.handles.LoadOrStore(name, m)
	}
	m := h.(dlock.Locker)
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error {
		if lockCtx.Err() != nil {
			l.countLoss(context.Cause(lockCtx))
		}
		return m.Unlock(lockCtx)
	}, nil
}

func (l *dlockLocker) roundTrips() int64 { return sumCounters(l.rts) }

func (l *dlockLocker) close() {
	for _, c := range l.clients {
		_ = c.Close()
	}
	for _, rdb := range l.rdbs {
		_ = rdb.Close()
	}
}

// dlockRueidisLocker is a dlock lock on rueidis (dlockrueidis), its
// round trips counted as rueidislock's are.
type dlockRueidisLocker struct {
	*dlockLocker
	rc rueidis.Client
	rt *atomic.Int64
}

// openDlockRueidis opens a dlock Client on a rueidis client for addr
// whose locks newLock makes.
func openDlockRueidis(addr string, renewal time.Duration, newLock func(c *dlock.Client, name string) (dlock.Locker, error)) (locker, error) {
	n := &atomic.Int64{}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	var opts []dlock.Option
	if renewal > 0 {
		opts = append(opts, dlock.WithWatchdogTimeout(renewal))
	}
	c, err := dlockrueidis.New(rueidisCounter{Client: rc, n: n}, opts...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	dl := &dlockLocker{c: c, clients: []*dlock.Client{c}, newLock: newLock}
	return &dlockRueidisLocker{dlockLocker: dl, rc: rc, rt: n}, nil
}

func (l *dlockRueidisLocker) roundTrips() int64 { return l.rt.Load() }

func (l *dlockRueidisLocker) close() {
	l.dlockLocker.close()
	l.rc.Close()
}

func sumCounters(cs []*counter) int64 {
	var n int64
	for _, c := range cs {
		n += c.n.Load()
	}
	return n
}

// redsync

type redsyncLocker struct {
	rdb     *redis.Client
	rt      *counter
	rs      *redsync.Redsync
	renewal time.Duration
}

func openRedsync(addr string, renewal time.Duration) (locker, error) {
	rdb, rt := newRDB(addr)
	return &redsyncLocker{rdb: rdb, rt: rt, rs: redsync.New(goredis.NewPool(rdb)), renewal: renewal}, nil
}

func (l *redsyncLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	// A redsync Mutex must not be shared by concurrent lockers (#30): one
	// per acquisition.
	expiry := peerTTL
	if l.renewal > 0 {
		expiry = l.renewal
	}
	m := l.rs.NewMutex(name, redsync.WithTries(math.MaxInt32), redsync.WithExpiry(expiry))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	stop := keepAlive(l.renewal, func(ctx context.Context) error {
		_, err := m.ExtendContext(ctx)
		return err
	})
	return func(ctx context.Context) error {
		stop()
		_, err := m.UnlockContext(ctx)
		return err
	}, nil
}

func (l *redsyncLocker) roundTrips() int64 { return l.rt.n.Load() }
func (l *redsyncLocker) close()            { _ = l.rdb.Close() }

// bsm/redislock

type redislockLocker struct {
	rdb     *redis.Client
	rt      *counter
	c       *redislock.Client
	opt     *redislock.Options
	ttl     time.Duration
	renewal time.Duration
}

func openRedislock(addr string, renewal, backoff time.Duration) (locker, error) {
	rdb, rt := newRDB(addr)
	ttl := peerTTL
	if renewal > 0 {
		ttl = renewal
	}
	return &redislockLocker{
		rdb: rdb, rt: rt, c: redislock.New(rdb), ttl: ttl, renewal: renewal,
		opt: &redislock.Options{RetryStrategy: redislock.LinearBackoff(backoff)},
	}, nil
}

func (l *redislockLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lk, err := l.c.Obtain(ctx, name, l.ttl, l.opt)
	if err != nil {
		return nil, err
	}
	stop := keepAlive(l.renewal, func(ctx context.Context) error { return lk.Refresh(ctx, l.ttl, nil) })
	return func(ctx context.Context) error {
		stop()
		return lk.Release(ctx)
	}, nil
}

func (l *redislockLocker) roundTrips() int64 { return l.rt.n.Load() }
func (l *redislockLocker) close()            { _ = l.rdb.Close() }

// keepAlive runs extend every renewal/3 until the returned stop is called:
// the refresh goroutine the READMEs of redsync and bsm/redislock leave to
// the user. It does nothing when renewal is 0.
func keepAlive(renewal time.Duration, extend func(context.Context) error) (stop func()) {
	if renewal <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(renewal / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = extend(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// rueidislock

type rueidisLocker struct {
	l  rueidislock.Locker
	rt *atomic.Int64
}

// rueidisCounter counts the round trips of a rueidis.Client: its Do and
// DoMulti calls, the only ones rueidislock (v1.0.79) makes (scripts run
// through Do).
type rueidisCounter struct {
	rueidis.Client
	n *atomic.Int64
}

func (c rueidisCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c rueidisCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoMulti(ctx, multi...)
}

func openRueidislock(addr string, renewal time.Duration) (locker, error) {
	n := &atomic.Int64{}
	opt := rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return rueidisCounter{Client: c, n: n}, nil
		},
		KeyMajority: 1,
		// Without NOLOOP every extend invalidates the key it just extended
		// and runs again at once.
		NoLoopTracking: true,
	}
	if renewal > 0 {
		opt.KeyValidity, opt.ExtendInterval = renewal, renewal/3
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l: l, rt: n}, nil
}

func (l *rueidisLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	_, cancel, err := l.l.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	// cancel deletes the key and returns once it is deleted.
	return func(context.Context) error { cancel(); return nil }, nil
}

func (l *rueidisLocker) roundTrips() int64 { return l.rt.Load() }
func (l *rueidisLocker) close()            { l.l.Close() }
