package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
)

// pollNoExpiry is how often a waiter retries a lock whose key has no TTL
// (not one dlock or Redisson wrote) when no unlock message comes.
const pollNoExpiry = time.Second

// acquire takes the lock for the owner in ctx (or a new owner), waiting
// unless try is set. Waiting is push: the waiter subscribes to the lock's
// channel and sleeps until an unlock message or until the current hold's
// lease runs out, whichever is first, so a lost message costs at most one
// lease, never a hang.
func (h *handle) acquire(ctx context.Context, try bool) (context.Context, error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	c := h.c
	owner, ok := ownerFrom(ctx, c)
	if !ok {
		owner = c.newOwner()
	}
	lease := h.lease()
	if hd := c.heldWith(h, owner); hd != nil && (hd.lease != lease || hd.watchdog == h.cfg.hasLease) {
		// One hash key has one expiry: a re-entry with another lease
		// would shorten or stretch the outer holds' lease behind their back.
		return nil, fmt.Errorf("%w: %q: re-entered with a lease (%v, watchdog %v) other than the one it is held with (%v, watchdog %v)",
			ErrInvalidOption, h.name, lease, !h.cfg.hasLease, hd.lease, hd.watchdog)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var w *pubsub.Waiter
	var last error // why the latest attempt failed, when the kind says
	defer func() {
		if w != nil {
			w.Close(false)
		}
	}()
	for {
		start := time.Now()
		req := request{owner: owner, id: c.newRequest(), lease: lease, wait: !try, fence: h.cfg.fenced}
		res, err := h.attempt(ctx, req)
		switch {
		case err != nil:
			// The script may have run although no reply came back.
			h.settle(ctx, req)
			if ctxDone(ctx) {
				return nil, h.gaveUp(ctx, req, last)
			}
			h.abandon(ctx, req)
			return nil, fmt.Errorf("dlock: lock %q: %w", h.name, err)
		case res.acquired && time.Since(start) >= validity(h.kind, lease):
			// The answer came after the lease it set had run out on our
			// clock (a long outage, a command re-sent after a restart and
			// answered from its latch): the lock may be someone else's by
			// now. Give it back and try again.
			h.giveBack(ctx, req)
			if try {
				return nil, notObtained(h.name, errLateReply)
			}
			continue
		case res.acquired:
			if w != nil {
				w.Close(true)
				w = nil
			}
			lockCtx, err := c.register(ctx, h, owner, res.token, start)
			if err != nil {
				h.giveBack(ctx, req)
			}
			return lockCtx, err
		case try:
			return nil, notObtained(h.name, res.reason)
		}
		last = res.reason

		wait := res.ttl
		if res.ttl < 0 {
			wait = pollNoExpiry
		}
		timer.Reset(wait)
		var wake <-chan struct{} // nil: only the timer wakes a kind without a channel
		switch ch := h.kind.channel(owner); {
		case ch == "":
		case w == nil:
			// Subscribe, then try again before sleeping: the unlock may
			// have been published before the subscription was confirmed.
			if w, err = c.hub.Subscribe(ctx, ch); err != nil {
				if ctx.Err() != nil {
					return nil, h.gaveUp(ctx, req, last)
				}
				if errors.Is(err, pubsub.ErrClosed) {
					return nil, ErrClosed // Close raced this Lock
				}
				h.abandon(ctx, req)
				return nil, fmt.Errorf("dlock: lock %q: subscribe: %w", h.name, err)
			}
			wake = w.Ready()
		default:
			wake = w.Wake()
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, h.gaveUp(ctx, req, last)
		}
		if c.isClosed() {
			// The Redis client may still work: leave the queue rather
			// than hold it up like a dead process until our deadline.
			h.abandon(ctx, req)
			return nil, ErrClosed
		}
	}
}

// errLateReply says why an acquisition was not kept.
var errLateReply = errors.New("the reply came after the lease had run out")

// notObtained is the error for an attempt that found the lock held; reason
// is the kind's detail, if any.
func notObtained(name string, reason error) error {
	if reason != nil {
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, name, reason)
	}
	return fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, name)
}

// gaveUp is the error for a wait that ctx ended; last is why the latest
// attempt failed, if the kind said.
func (h *handle) gaveUp(ctx context.Context, req request, last error) error {
	h.abandon(ctx, req)
	if last != nil {
		return fmt.Errorf("%w: %q: %w (last attempt: %w)", ErrNotObtained, h.name, ctxErr(ctx), last)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, h.name, ctxErr(ctx))
}

// ctxErr is ctx.Err(), counting a deadline that has passed as exceeded
// even before ctx's timer has fired: a Redis client whose socket deadline
// is ctx's deadline can fail a moment before ctx.Err() says so.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

func ctxDone(ctx context.Context) bool { return ctxErr(ctx) != nil }

// settle is called when an attempt failed without an answer (ctx ended,
// the connection broke, the reply timed out): the script may have run all
// the same, leaving a hold nobody knows about. It sends the same request
// again, whose latch answers as the first run did, and gives back what it
// took. A first run that never arrived may also take the lock now; that
// hold is given back too.
func (h *handle) settle(ctx context.Context, req request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	req.wait = false
	if res, err := h.attempt(ctx, req); err == nil && res.acquired {
		h.giveBack(ctx, req)
	}
}

// giveBack releases a hold that an attempt took but the caller will not
// get.
func (h *handle) giveBack(ctx context.Context, req request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rel := request{owner: req.owner, id: h.c.newRequest(), lease: req.lease}
	if _, err := h.kind.release(ctx, rel); err != nil {
		h.c.cfg.logger.Warn("dlock: giving back a hold failed; it expires with its lease", "lock", h.name, "error", err)
	}
}

// abandon tells the kind the owner no longer waits, even though ctx is done.
func (h *handle) abandon(ctx context.Context, req request) {
	if !req.wait {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.kind.abandon(ctx, req); err != nil {
		h.c.cfg.logger.Warn("dlock: leaving the wait queue failed", "lock", h.name, "error", err)
	}
}
