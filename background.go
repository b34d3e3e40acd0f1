package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
)

// Cleanup never runs on a caller's time: giving back a hold that an
// abandoned attempt took, leaving a fair queue, and a release that failed
// for a reason that may pass all go on in the background, bounded, while
// the call that started them returns.

// cleanupTimeout bounds one cleanup request to Redis.
const cleanupTimeout = 5 * time.Second

// cleanupGrace is how long a call waits for the cleanup it started before
// it leaves the cleanup to the background: long enough for a Redis that
// answers, short enough to keep deadlines true on one that does not.
const cleanupGrace = 25 * time.Millisecond

// backgroundWork counts the background operations under way per owner's
// hold, so that an acquisition by the same owner of the same lock can wait
// for them (awaitIdle). Its mutex guards the counts; it calls nothing
// under it. The zero value has no work under way.
type backgroundWork struct {
	mu   sync.Mutex
	busy map[holdKey]*busy
}

// busy counts the background operations on one owner's hold of one lock.
type busy struct {
	n    int
	idle chan struct{} // closed when n drops to 0; made by the first awaitIdle
}

// run runs f on its own goroutine. Each request f makes is bounded
// by cleanupTimeout, and f runs to its end even after Close (the Redis
// client may still work). Until f returns, the owner's hold k is busy: an acquisition by
// the same owner of the same lock waits for it (awaitIdle), so that a
// give-back or release still on its way cannot delete a newer hold. The
// returned channel is closed when f has returned.
func (w *backgroundWork) run(k holdKey, f func(ctx context.Context)) <-chan struct{} {
	return w.spawn(k, w.add(k), f)
}

// add counts one more background operation on k, for spawn to run or
// end to take back.
func (w *backgroundWork) add(k holdKey) *busy {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.busy[k]
	if b == nil {
		if w.busy == nil {
			w.busy = map[holdKey]*busy{}
		}
		b = &busy{}
		w.busy[k] = b
	}
	b.n++
	return b
}

// spawn runs f for the operation that add counted in b.
func (w *backgroundWork) spawn(k holdKey, b *busy, f func(ctx context.Context)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.end(k, b)
		f(context.Background())
	}()
	return done
}

// end takes back the operation that add counted in b: it is over.
func (w *backgroundWork) end(k holdKey, b *busy) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b.n--; b.n == 0 {
		delete(w.busy, k)
		if b.idle != nil {
			close(b.idle)
		}
	}
}

// awaitIdle waits until no background operation is under way on the
// owner's hold k, or until ctx ends.
func (w *backgroundWork) awaitIdle(ctx context.Context, k holdKey) error {
	w.mu.Lock()
	b := w.busy[k]
	if b == nil {
		w.mu.Unlock()
		return nil
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	w.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// grace waits for done for at most cleanupGrace.
func grace(done <-chan struct{}) {
	t := time.NewTimer(cleanupGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// giveBack releases, in the background, a hold that an attempt may have
// taken but the caller will not get, and returns a channel closed when
// that is done; callers wait for it at most cleanupGrace (grace). A
// re-entry took nothing the owner did not hold already.
func (h *handle) giveBack(req request) <-chan struct{} {
	if req.reentry {
		return closedChan
	}
	// The attempt may have run and set the lease, its reply lost with the
	// connection (a Redis restart): a give-back that fails for a reason
	// that may pass is sent again, as a release is (retryRelease), until
	// that lease has run out, or the lock would stay taken for a lease.
	until := time.Now().Add(validity(req.lease))
	return h.c.work.run(h.holdKey(req.owner), func(ctx context.Context) {
		h.sendBack(ctx, req, until)
	})
}

// sendBack releases what req's owner may hold without a hold of this
// Client (an attempt's take that nobody kept, a hand-over to a waiter that
// left), sending the release again after a failure that may pass until
// until, when the lease it may have set has run out.
func (h *handle) sendBack(ctx context.Context, req request, until time.Time) {
	send := func(ctx context.Context) error {
		_, err := h.kind.release(ctx, req)
		return err
	}
	if _, err := h.sendUntil(ctx, until, nil, send); err != nil {
		// Redis unreachable all along: the attempt almost surely took
		// nothing, and an outage is reported elsewhere.
		level := slog.LevelWarn
		if errors.Is(err, ErrUnreachable) || transport.DialFailed(err) {
			level = slog.LevelDebug
		}
		h.c.cfg.logger.Log(ctx, level, "dlock: giving back a lock this owner may hold failed, so it expires with its lease", "lock", h.name, "error", err)
	}
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// leave takes a waiter that stopped waiting out of the kind's queue, for
// kinds that keep one (the fair lock), in the background, and waits
// cleanupGrace for it. A leave that fails is sent again, as a release
// is, for as long as the owner's place could hold the queue up (holdsUp)
// or a lease handed over to it could last, whichever is longer: a leave
// given up during an outage shorter than that would leave a place that
// stalls every waiter behind it once Redis is back. When a release handed the lock over to the owner before it
// left, the lock is given back through the release path (giveBack's
// sendBack), with its re-sends: nobody else would release it before its
// lease ran out.
func (h *handle) leave(req request) {
	a, ok := h.kind.(leaver)
	if !ok || !req.wait {
		return
	}
	until := time.Now().Add(max(validity(req.lease), a.holdsUp()))
	grace(h.c.work.run(h.holdKey(req.owner), func(ctx context.Context) {
		holding := false
		_, err := h.sendUntil(ctx, until, nil, func(ctx context.Context) (err error) {
			holding, err = a.leave(ctx, req)
			return err
		})
		switch {
		case err != nil:
			h.c.cfg.logger.Warn("dlock: leaving the wait queue failed", "lock", h.name, "error", err)
		case holding:
			h.sendBack(ctx, req, until)
		}
	}))
}
