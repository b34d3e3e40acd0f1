package dlock

import (
	"context"
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
	c := h.c
	if c.isClosed() {
		return nil, ErrClosed
	}
	owner, ok := ownerFrom(ctx, c)
	if !ok {
		owner = c.newOwner()
	}
	lease := h.lease()
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
		case err != nil && ctx.Err() != nil:
			return nil, h.gaveUp(ctx, req, last)
		case err != nil:
			h.abandon(ctx, req)
			return nil, fmt.Errorf("dlock: lock %q: %w", h.name, err)
		case res.acquired:
			if w != nil {
				w.Close(true)
				w = nil
			}
			return c.register(ctx, h, owner, res.token, start), nil
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
		return fmt.Errorf("%w: %q: %w (last attempt: %w)", ErrNotObtained, h.name, ctx.Err(), last)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, h.name, ctx.Err())
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
