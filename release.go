package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Unlock releases the hold that ctx stands for: ctx is a lock context
// returned by Lock or TryLock on this lock, or a context derived from one.
// The lock context ends with cause ErrUnlocked (ErrLockLost if the hold
// turns out to have been lost), and the lock is free when every hold is
// released.
//
// Only the last of an owner's reentrant holds talks to Redis; the others
// are counted in the Client. The error wraps ErrNotHeld when ctx carries
// no hold of this lock, when that hold was already released, or when Redis
// no longer had it (it expired or was deleted). Each hold is released
// once: Unlock with the same context again returns ErrNotHeld.
//
// Unlock returns by ctx's deadline, if it has one (derive it from the lock
// context: context.WithTimeout(lockCtx, time.Second)); cancelling ctx does
// not stop it, since a lock context is cancelled when its lock is lost and
// the release must still reach Redis. When the release fails for a reason
// that may pass (a timeout, a broken or refused connection, a server still
// loading its data) or is still on its way at the deadline, Unlock returns
// that error and the release goes on in the background until it gets
// through or the hold's lease has run out; its outcome is logged.
func (h *handle) Unlock(ctx context.Context) (err error) {
	if err := h.check(ctx); err != nil {
		return err
	}
	acq, ok := ctx.Value(h.acqKey).(*acquisition)
	if !ok {
		return fmt.Errorf("%w: %q: the context carries no hold of this lock; pass the context its Lock returned", ErrNotHeld, h.name)
	}
	defer h.c.observeUnlock(ctx, h, acq, &err)
	bound, cancel := withDeadlineOf(ctx)
	defer cancel()
	if err := acq.hold.lockOp(bound); err != nil {
		return fmt.Errorf("dlock: unlock %q: %w", h.name, err)
	}
	release, err := h.dropAcquisition(acq)
	acq.hold.unlockOp()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %q (%w)", ErrNotHeld, h.name, err)
	case release == nil:
		acq.end(ErrUnlocked)
		return nil
	}
	return h.release(bound, acq, release)
}

// dropAcquisition takes acq out of its hold for Unlock, with hd.op held
// (registry.dropAcquisition). When it was the hold's last acquisition, it
// returns the busy mark under which the release must run (spawn), so that
// a new acquisition by the owner waits for it (enter, awaitIdle). The mark
// goes up before the hold leaves the registry, under the other lock: an
// acquisition by the owner that looks in between finds the hold, waits for
// its op (held by Unlock) and then looks again, finding the mark.
func (h *handle) dropAcquisition(acq *acquisition) (release *busy, err error) {
	k := acq.hold.holdKey()
	mark := h.c.work.add(k)
	last, err := h.c.holds.dropAcquisition(acq)
	if !last {
		h.c.work.end(k, mark)
		return nil, err
	}
	return mark, nil
}

// withDeadlineOf returns a context with ctx's deadline, if any, that is not
// cancelled with ctx.
func withDeadlineOf(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	return context.WithoutCancel(ctx), func() {}
}

// release releases the last acquisition of a hold in Redis, under the
// busy mark b, and returns the first outcome. A release that failed for a
// reason that may pass goes on in the background (retryRelease). When ctx
// has a deadline, the release runs in the background from the start, and
// release returns by the deadline.
func (h *handle) release(ctx context.Context, acq *acquisition, b *busy) error {
	hd, k := acq.hold, acq.hold.holdKey()
	var err error
	if _, ok := ctx.Deadline(); ok {
		first := make(chan error, 1)
		h.c.work.spawn(k, b, func(bg context.Context) {
			err := h.sendRelease(bg, hd, true)
			first <- err
			h.retryRelease(bg, hd, err)
		})
		select {
		case err = <-first:
		case <-ctx.Done():
			acq.end(ErrUnlocked)
			return fmt.Errorf("dlock: unlock %q: %w (the release goes on in the background)", h.name, context.DeadlineExceeded)
		}
	} else {
		err = h.sendRelease(ctx, hd, true)
		if retrying(err) {
			h.c.work.spawn(k, b, func(bg context.Context) { h.retryRelease(bg, hd, err) })
		} else {
			h.c.work.end(k, b)
		}
	}
	switch {
	case errors.Is(err, ErrNotHeld):
		acq.end(fmt.Errorf("%w: %q: not held at unlock", ErrLockLost, h.name))
		return fmt.Errorf("%w: %q: Redis no longer had it", ErrNotHeld, h.name)
	case retrying(err):
		acq.end(ErrUnlocked)
		return fmt.Errorf("dlock: unlock %q: %w (retrying in the background until the lease ends)", h.name, err)
	case err != nil:
		acq.end(ErrUnlocked)
		return fmt.Errorf("dlock: unlock %q: %w (the lock expires with its lease)", h.name, err)
	}
	acq.end(ErrUnlocked)
	return nil
}

// maxReleasePause bounds the pause between tries of a release or a
// give-back that failed: a lock stays taken for at most about this long
// after Redis answers again.
const maxReleasePause = 250 * time.Millisecond

// retrying reports whether a release that failed with err is tried again.
func retrying(err error) bool {
	return err != nil && !errors.Is(err, ErrNotHeld) && mayPass(err)
}

// retryRelease goes on with a release whose first try failed with err, if
// retrying says so: it sends the release again until Redis answers, for as
// long as the hold's lease lasts (after that Redis lets the lock expire by
// itself), and logs how it ended. Resending is safe: a release that did
// run leaves nothing for the next to release, and a hold that is gone
// after a try without an answer was released by that try.
func (h *handle) retryRelease(ctx context.Context, hd *hold, err error) {
	if !retrying(err) {
		return
	}
	until := h.c.holds.deadline(hd)
	tries, err := h.sendUntil(ctx, until, err, func(ctx context.Context) error {
		if err := h.sendRelease(ctx, hd, false); !errors.Is(err, ErrNotHeld) {
			return err
		}
		return nil
	})
	h.logRelease(hd, tries, err)
}

// sendUntil sends a release (or a give-back) with send until it gets
// through or fails for good, for as long as until allows: after a failure
// that may pass it waits a pause that grows to maxReleasePause. first is
// the error of a try already made (nil: send at once). It returns how many
// tries there were in all and the last error.
func (h *handle) sendUntil(ctx context.Context, until time.Time, first error, send func(context.Context) error) (int, error) {
	tries, err, gate := 0, first, reachGate(h.c, h.kind)
	if first != nil {
		tries = 1
	}
	for pause := time.Duration(0); tries == 0 || retrying(err); pause = min(max(2*pause, 50*time.Millisecond), maxReleasePause) {
		if tries > 0 && (h.c.isClosed() || !gate.Pause(ctx, pause, until)) {
			break
		}
		if err = gate.Err(); err == nil {
			rctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			err = send(rctx)
			cancel()
			gate.Saw(err)
		}
		tries++
	}
	return tries, err
}

// sendRelease sends one release of hd's owner's hold and returns nil, an
// error wrapping ErrNotHeld, or the Redis error. The first try hands the
// lock over to a waiter of this Client when the kind can (handoff.go). A
// release that frees the lock without a message (a SpinLock's) wakes the
// first waiter of this Client on the lock (a Mutex's, on the same name)
// to try again, since no message will.
func (h *handle) sendRelease(ctx context.Context, hd *hold, first bool) error {
	req := request{owner: hd.owner, lease: hd.lease, fence: h.cfg.fenced}
	var res releaseResult
	var err error
	gate := reachGate(h.c, h.kind)
	hand, ok := h.kind.(handoffer)
	next, when := (*place)(nil), ""
	if ok && first {
		next, when = h.c.queues.next(h.queueKey())
	}
	if next == nil || h.c.cfg.replicas.enabled() { // a hand-over would skip the replica sync
		if next != nil {
			h.c.queues.handedOver(h.queueKey(), next, grant{})
		}
		if err = gate.Err(); err == nil {
			res, err = h.kind.release(ctx, req)
			gate.Saw(err)
		}
		if err == nil && res == released && !ok && h.kind.channel(hd.owner) == "" {
			h.c.queues.wakeFirst(h.queueKey())
		}
	} else {
		start := time.Now()
		var ho handoff
		if err = gate.Err(); err == nil {
			ho, err = hand.releaseTo(ctx, req, next.req, when, 1) // the waiter subscribed this Client
			gate.Saw(err)
		}
		h.c.queues.handedOver(h.queueKey(), next, grant{ok: err == nil && ho.handed, freed: err == nil && ho.freed, unknown: err != nil,
			token: ho.token, start: start})
		res = ho.res
	}
	if err == nil && res == notHeld {
		return ErrNotHeld
	}
	return err
}

// logRelease reports how a release that failed at first ended.
func (h *handle) logRelease(hd *hold, tries int, err error) {
	log := h.c.cfg.logger
	switch {
	case err == nil:
		log.Info("dlock: lock released after a retry", "lock", h.name, "owner", hd.owner, "tries", tries)
	case retrying(err):
		log.Warn("dlock: release still failing as the lease ends; the lock expires with it", "lock", h.name, "owner", hd.owner, "tries", tries, "error", err)
	default:
		log.Warn("dlock: release failed; the lock expires with its lease", "lock", h.name, "owner", hd.owner, "tries", tries, "error", err)
	}
}

// mayPass reports a release failure that trying again may get past: no
// answer (a timeout, a broken or refused connection) or a server that is
// loading its data or between masters.
func mayPass(err error) bool {
	return !errors.Is(err, redis.ErrClosed) && (!isRedisReply(err) || transport.Transient(err))
}

// isRedisReply reports an error that Redis sent as its answer.
func isRedisReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// loser is implemented by dlock's own locks: lose gives up a hold that
// could not be released, so that the watchdog stops renewing it and it
// expires with its lease instead of staying held for good.
type loser interface {
	lose(lockCtx context.Context)
}

func (h *handle) lose(lockCtx context.Context) {
	c := h.c
	owner, ok := ownerFrom(lockCtx, c)
	if !ok {
		return
	}
	if hd := c.holds.held(h.holdKey(owner)); hd != nil {
		hd.lose(fmt.Errorf("%w: %q: could not be released; left to expire with its lease", ErrLockLost, h.name))
	}
}
