package main

// The hot-lock scenario with deadlock detection on: what recording and
// checking the waits costs Redis per contended wait, and whether it ever
// takes the hot lock's queue for a deadlock (it must not: a single lock
// has no cycle). Its row, dlock-deadlock, runs beside dlock's in the hot
// table, and writeDeadlockNote compares the two.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// deadlockEvery is the check interval of the dlock-deadlock row.
const deadlockEvery = 20 * time.Millisecond

// deadlockLocker is a dlock Mutex on a Client WithDeadlockDetection whose
// waiters each hold a lock of their own (taken once, kept for the run),
// so that every contended wait is one detection records and checks: a
// Lock with a fresh context holds nothing and is not recorded.
type deadlockLocker struct {
	*dlockLocker
	owners chan context.Context // lock contexts of held private locks, free to wait with
	mu     sync.Mutex
	held   []ownerLock // every private lock, released at close
	next   atomic.Int64
}

type ownerLock struct {
	m   *dlock.Mutex
	ctx context.Context
}

func openDlockDeadlock(addr string, renewal time.Duration) (locker, error) {
	rdb, rt := newRDB(addr)
	opts := []dlock.Option{dlock.WithDeadlockDetection(deadlockEvery)}
	if renewal > 0 {
		opts = append(opts, dlock.WithWatchdogTimeout(renewal))
	}
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	dl := &dlockLocker{rdbs: []*redis.Client{rdb}, rts: []*counter{rt}, c: c, clients: []*dlock.Client{c},
		newLock: func(c *dlock.Client, name string) (dlock.Locker, error) { return c.NewMutex(name) }}
	return &deadlockLocker{dlockLocker: dl, owners: make(chan context.Context, 1024)}, nil
}

// owner returns the lock context of a private lock no waiter uses now,
// taking a new one when all are in use.
func (l *deadlockLocker) owner(ctx context.Context) (context.Context, error) {
	select {
	case o := <-l.owners:
		return o, nil
	default:
	}
	m, err := l.c.NewMutex(fmt.Sprintf("bench:owner:%p:%d", l, l.next.Add(1)))
	if err != nil {
		return nil, err
	}
	o, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.held = append(l.held, ownerLock{m, o})
	l.mu.Unlock()
	return o, nil
}

func (l *deadlockLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	o, err := l.owner(ctx)
	if err != nil {
		return nil, err
	}
	// The hot lock is taken with the owner's context, so that the wait is
	// recorded; ctx still bounds it (the worker cancels at the end).
	waitCtx, stop := context.WithCancel(o)
	defer context.AfterFunc(ctx, stop)()
	unlock, err := l.dlockLocker.lock(waitCtx, name)
	stop()
	if err != nil {
		l.owners <- o
		return nil, err
	}
	return func(ctx context.Context) error {
		defer func() { l.owners <- o }()
		return unlock(ctx)
	}, nil
}

func (l *deadlockLocker) close() {
	l.mu.Lock()
	for _, h := range l.held {
		_ = h.m.Unlock(h.ctx)
	}
	l.mu.Unlock()
	l.dlockLocker.close()
}

// writeDeadlockNote compares the dlock-deadlock row with dlock's: Redis
// commands per contended wait, and the Locks failed with ErrDeadlock.
func (r *report) writeDeadlockNote(w writer) {
	var plain, detected *hotResult
	for _, h := range r.hot {
		switch h.Lib {
		case "dlock":
			plain = h
		case "dlock-deadlock":
			detected = h
		}
	}
	if detected == nil || detected.Acq == 0 {
		return // not run, or no result
	}
	perWait := func(h *hotResult) string {
		if h == nil || h.Handoff.N == 0 {
			return "–"
		}
		return f2(h.Executed * float64(h.Acq) / float64(h.Handoff.N))
	}
	w("**Deadlock detection.** `dlock-deadlock` is `dlock` with `WithDeadlockDetection(%v)`, each waiter holding a lock of its own (so that every contended wait is recorded and checked). Redis commands executed per contended wait (handoff): %s, against %s for `dlock`. Locks failed with `ErrDeadlock`: %d (a single lock has no cycle: any is a false positive).\n\n",
		deadlockEvery, perWait(detected), perWait(plain), detected.Deadlocks)
}
