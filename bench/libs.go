package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
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
	close()
}

// lib is one library, configured as a user would configure it.
type lib struct {
	id       string // stable name used in flags, jobs and tables
	settings string // how it is configured, for the report
	// clientCmds are the commands the library sends itself; INFO
	// commandstats also counts the commands its scripts call.
	clientCmds []string
	// open connects to Redis. A renewal > 0 asks for locks whose lease is
	// kept alive every renewal/3 with a lease of renewal (the watchdog
	// scenario); the libraries without a watchdog get the refresh
	// goroutine per lock their READMEs suggest.
	open func(addr string, renewal time.Duration) (locker, error)
	// redisKey is the key that holds the lock called name.
	redisKey func(name string) string
}

// Commands the go-redis based libraries send.
var (
	scriptCmds = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "script"}
	dlockCmds  = append([]string{"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "ping"}, scriptCmds...)
)

// Lease of the peers' locks outside the watchdog scenario: dlock's
// watchdog lease, far longer than any hold in the bench (the waiter-scale
// scenario holds its locks for several seconds).
const peerTTL = 30 * time.Second

var libs = []lib{
	{
		id:         "dlock",
		settings:   "`Mutex`, watchdog lease 30 s, pub/sub wake-up (one subscription per Client)",
		clientCmds: dlockCmds,
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlock(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewMutex(name) })
		},
	},
	{
		id:         "dlock-fair",
		settings:   "`FairMutex` (Redisson FairLock: FIFO queue, each waiter woken on its own channel), watchdog lease 30 s",
		clientCmds: dlockCmds,
		open: func(addr string, r time.Duration) (locker, error) {
			return openDlock(addr, r, func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewFairMutex(name) })
		},
	},
	{
		id:         "redsync",
		settings:   "one pool (go-redis v9), expiry 30 s, default retry delay rand(50–250 ms), tries unlimited",
		clientCmds: append([]string{"set"}, scriptCmds...),
		open:       openRedsync,
	},
	{
		id:         "redislock-1ms",
		settings:   "`Obtain` with `LinearBackoff(1 ms)`, TTL 30 s",
		clientCmds: scriptCmds,
		open:       func(addr string, r time.Duration) (locker, error) { return openRedislock(addr, r, time.Millisecond) },
	},
	{
		id:         "redislock-10ms",
		settings:   "`Obtain` with `LinearBackoff(10 ms)`, TTL 30 s",
		clientCmds: scriptCmds,
		open:       func(addr string, r time.Duration) (locker, error) { return openRedislock(addr, r, 10*time.Millisecond) },
	},
	{
		id:         "rueidislock",
		settings:   "`KeyMajority` 1 (one key, as in its README benchmark), `NoLoopTracking` (needs Redis ≥ 7.0.5), validity 5 s auto-extended, client-side-caching wake-up",
		clientCmds: scriptCmds,
		open:       openRueidislock,
		// KeyMajority 1: one key, number 0.
		redisKey: func(name string) string { return "rueidislock:0:" + name },
	},
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

func libByID(id string) (lib, error) {
	for _, l := range libs {
		if l.id == id {
			if l.redisKey == nil {
				l.redisKey = func(name string) string { return name }
			}
			return l, nil
		}
	}
	return lib{}, fmt.Errorf("bench: unknown library %q", id)
}

// dlock

type dlockLocker struct {
	rdb     *redis.Client
	c       *dlock.Client
	newLock func(c *dlock.Client, name string) (dlock.Locker, error)
	handles sync.Map // name -> dlock.Locker: a handle per name, as an application keeps them
}

func openDlock(addr string, renewal time.Duration, newLock func(c *dlock.Client, name string) (dlock.Locker, error)) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	var opts []dlock.Option
	if renewal > 0 {
		opts = append(opts, dlock.WithWatchdogTimeout(renewal))
	}
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &dlockLocker{rdb: rdb, c: c, newLock: newLock}, nil
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
	return func(context.Context) error { return m.Unlock(lockCtx) }, nil
}

func (l *dlockLocker) close() {
	_ = l.c.Close()
	_ = l.rdb.Close()
}

// redsync

type redsyncLocker struct {
	rdb     *redis.Client
	rs      *redsync.Redsync
	renewal time.Duration
}

func openRedsync(addr string, renewal time.Duration) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	return &redsyncLocker{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb)), renewal: renewal}, nil
}

func (l *redsyncLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	// A redsync Mutex must not be shared by concurrent lockers (#30): one
	// per acquisition.
	opts := []redsync.Option{redsync.WithTries(math.MaxInt32), redsync.WithExpiry(peerTTL)}
	if l.renewal > 0 {
		opts = append(opts, redsync.WithExpiry(l.renewal))
	}
	m := l.rs.NewMutex(name, opts...)
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

func (l *redsyncLocker) close() { _ = l.rdb.Close() }

// bsm/redislock

type redislockLocker struct {
	rdb     *redis.Client
	c       *redislock.Client
	opt     *redislock.Options
	ttl     time.Duration
	renewal time.Duration
}

func openRedislock(addr string, renewal, backoff time.Duration) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ttl := peerTTL
	if renewal > 0 {
		ttl = renewal
	}
	return &redislockLocker{
		rdb: rdb, c: redislock.New(rdb), ttl: ttl, renewal: renewal,
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

func (l *redislockLocker) close() { _ = l.rdb.Close() }

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
	l rueidislock.Locker
}

func openRueidislock(addr string, renewal time.Duration) (locker, error) {
	opt := rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  1,
		// Without NOLOOP the client is told of its own writes: every
		// extend invalidates the key it just extended and is run again at
		// once, a loop that saturated client and server in the watchdog
		// scenario (90,000 extends/s for 10,000 locks).
		NoLoopTracking: true,
	}
	if renewal > 0 {
		opt.KeyValidity, opt.ExtendInterval = renewal, renewal/3
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l: l}, nil
}

func (l *rueidisLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	_, cancel, err := l.l.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	// cancel deletes the key and returns once it is deleted.
	return func(context.Context) error { cancel(); return nil }, nil
}

func (l *rueidisLocker) close() { l.l.Close() }
