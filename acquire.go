package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
)

// contender is what one call that may wait contributes to the acquire
// loop: a Lock (waiter, wait.go: the lock kinds and a PermitSemaphore's
// permits, through handle), a Semaphore's Acquire or a latch's Await
// (syncWait, synchronizer.go: calls without a hold). The loop never asks
// which one it runs.
type contender interface {
	// attempt makes one try. done: the call has what it waited for;
	// otherwise res.ttl bounds the next sleep and res.reason says why the
	// try failed, if the primitive says. first is set for the first try of
	// a call that may wait.
	attempt(ctx context.Context, first bool) (done bool, res attemptResult, err error)
	// sleep waits after a try that was not done: until a wake-up, res.ttl
	// or the end of ctx (an error). done: what the call waited for came
	// during the sleep (a hand-over).
	sleep(ctx context.Context, res attemptResult) (done bool, err error)
	// busy is the error of a try that was not done, for a call that does
	// not wait.
	busy(res attemptResult) error
	// gate is the reach gate a waiting call waits at while Redis cannot
	// be reached.
	gate() *transport.Gate
	// outlast reports whether a waiting call goes on trying after err,
	// its tries having failed without an answer for failing (a failover,
	// a restart under way): the primitive's patience.
	outlast(err error, failing time.Duration) bool
	// observer is what the call reports to (nil: no observers).
	observer() *lockObs
	// end is called once when the call returns with err.
	end(err error)
}

// retryPause is how long a waiting call that outlasts a failure without
// an answer (contender.outlast) sleeps before its next try.
const retryPause = 100 * time.Millisecond

// acquire is the one acquire/wait loop of every primitive: each round is
// one attempt and, while the primitive is taken (another owner holds the
// lock, no permit is free, the latch is closed), one sleep. Waiting is
// push: the sleep subscribes to the primitive's channel and lasts until a
// message or until the attempt's ttl (the current hold's lease, a poll
// bound), whichever is first, so a lost message costs at most that, never
// a hang. While Redis cannot be reached, a waiting call waits at the reach
// gate. acquire returns by ctx's deadline whatever Redis does: cleanup goes
// on in the background.
func acquire(ctx context.Context, c contender, try bool) (err error) {
	defer func() { c.end(err) }()
	var failing time.Time // since when attempts fail without an answer
	for round := 0; ; round++ {
		done, res, err := c.attempt(ctx, round == 0 && !try)
		switch {
		case done:
			return nil
		case errors.Is(err, ErrUnreachable) && !try && c.gate().Wait(ctx):
			failing = time.Time{}
			continue // Redis is back: try again at once
		case err != nil && !try && c.outlast(err, since(&failing)):
			res = attemptResult{ttl: retryPause, reason: err}
		case err != nil:
			return err
		case try:
			return c.busy(res)
		default:
			failing = time.Time{}
		}
		c.observer().sleeping(res)
		if done, err := c.sleep(ctx, res); done || err != nil {
			return err
		}
	}
}

// since returns how long ago *t was, setting it to now if it is zero.
func since(t *time.Time) time.Duration {
	if t.IsZero() {
		*t = time.Now()
	}
	return time.Since(*t)
}

// waiter returns the contender of a Lock or TryLock on h with ctx: its
// request (the owner in ctx or a new one), its sleeper and its observer.
func (h *handle) waiter(ctx context.Context, try bool) (*waiter, error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	req, err := h.request(ctx, try)
	if err != nil {
		return nil, err
	}
	_, counts := h.kind.(countedWakes)
	_, listens := h.kind.(messageHander)
	w := &waiter{sleeper: sleeper{hub: h.c.hub, counts: counts, listens: listens}, h: h, req: req, hands: h.handsOver(req)}
	if s, ok := h.kind.(spinner); ok && !try {
		w.spin = s.newBackoff()
	}
	w.ob = h.c.observeLock(ctx, h, try) // observe.go; nil without observers
	return w, nil
}

// result is what a Lock whose loop ended with err returns.
func (w *waiter) result(err error) (context.Context, error) {
	if err != nil {
		return nil, err
	}
	return w.lockCtx, nil
}

// request returns the request of a Lock or TryLock with ctx: the owner in
// ctx or a new one, and the handle's lease. A re-entry must set the lease
// its hold was taken with: one hash key has one expiry, and another lease
// would shorten or stretch the outer holds' lease behind their back.
func (h *handle) request(ctx context.Context, try bool) (request, error) {
	if _, ok := h.kind.(selfKept); ok { // each attempt makes its own owner: no re-entry
		return request{fresh: true, lease: h.lease(), wait: !try}, nil
	}
	owner, ok := ownerFrom(ctx, h.c)
	if !ok {
		// A new owner has no hold, no background work and no place in
		// any queue: the lookups for them are skipped (request.fresh).
		owner = h.c.newOwner()
	}
	req := request{owner: owner, fresh: !ok, lease: h.lease(), wait: !try, fence: h.cfg.fenced}
	if req.fresh {
		return req, nil
	}
	if hd := h.c.holds.held(h.holdKey(owner)); hd != nil && (hd.lease != req.lease || hd.watchdog == h.cfg.hasLease) {
		return req, fmt.Errorf("%w: %q: re-entered with a lease (%v, watchdog %v) other than the one it is held with (%v, watchdog %v)",
			ErrInvalidOption, h.name, req.lease, !h.cfg.hasLease, hd.lease, hd.watchdog)
	}
	return req, nil
}

// attempt makes one attempt for the waiter's request and, when it
// succeeds, registers the hold and keeps its lock context (done); when
// another owner holds the lock it returns the attempt's result for the
// wait. It reads in three steps: enter (a re-entry, or wait for background
// work on the owner's earlier hold), send (the script, on this goroutine
// or aside), settle (what the reply means).
//
// The first attempt of a Lock on a lock that hands over and that this
// Client is busy with already skips Redis and goes straight to waiting its
// turn (later attempts do ask: the local hold may have been lost). When
// another owner of this Client holds the lock, the attempt would fail.
// When other Locks of this Client wait for it, subscribed, they are ahead,
// and a release reaches this Lock through them: the Lock joins them
// without the attempt that follows a new subscription.
func (w *waiter) attempt(ctx context.Context, first bool) (bool, attemptResult, error) {
	h, req := w.h, w.req
	w.req.fresh = false // an attempt may leave background work on the owner's hold
	if k, ok := h.kind.(selfKept); ok {
		// An owner per attempt: what an earlier attempt may have taken is
		// given back apart, and a later one never finds it.
		owner, err := k.newOwner()
		if err != nil {
			return false, attemptResult{}, err
		}
		req.owner = owner
		w.req = req
	}
	if first {
		w.subscribeEarly(ctx)
	}
	if first && w.hands {
		switch d, how := h.busyHere(req.owner); how {
		case heldHere:
			return false, attemptResult{ttl: max(d, time.Millisecond)}, nil
		case waitedHere:
			w.joined = true
			return false, attemptResult{ttl: d}, nil
		}
		if w.counts {
			w.joinCounted(ctx)
		}
	}
	hd, err := h.enter(ctx, &req)
	switch {
	case errors.Is(err, ErrNotReentrant):
		return false, attemptResult{}, err
	case err != nil:
		return false, attemptResult{}, h.gaveUp(ctx, req, w.last)
	}
	done := func() {} // called once the attempt has finished
	if hd != nil {
		done = hd.unlockOp
	}
	if ctxDone(ctx) {
		// Nothing is sent for a caller that has given up: an attempt
		// handed to another goroutine (sendAside, sendLeaving) can have
		// its reply before the caller looks at ctx, and would take the
		// lock for it.
		done()
		return false, attemptResult{}, h.gaveUp(ctx, req, w.last)
	}
	start := time.Now()
	var res attemptResult
	left := false
	if h.sendsInline(ctx) {
		res, err = h.send(ctx, req)
	} else {
		res, left, err = h.sendAside(ctx, req, done)
	}
	if !left {
		defer done()
	}
	w.lockCtx, res, err = h.settle(ctx, req, hd, start, res, err, w.last)
	// Only an attempt answered "taken" dates the hand-overs the waiter
	// may take (handedByMessage); after any other outcome without the
	// lock (an error, a late reply given back: each may have given back
	// a hold that a hand-over made), none is taken until the next such
	// answer.
	w.sent, w.seq = time.Time{}, 0
	if err == nil && w.lockCtx == nil && res.seq != 0 {
		w.sent, w.seq = start, res.seq
	}
	// A counting waiter that took a permit with more left passes its
	// wake-up on: a waiter of this Client that joined the queue without
	// an attempt may be waiting while permits are free.
	w.spare = w.spare || w.lockCtx != nil && res.more && w.sub != nil
	return w.lockCtx != nil, res, err
}

// settle is what the reply to an attempt sent at start means: an error
// (the caller gave up, or Redis failed), a re-entry whose hold is gone, a
// reply too late to keep, the lock taken (its hold registered, its lock
// context returned) or held by another owner (the result, for the wait).
// last is why the previous attempt failed, for the error if ctx ended.
func (h *handle) settle(ctx context.Context, req request, hd *hold, start time.Time, res attemptResult, err error, last error) (context.Context, attemptResult, error) {
	switch {
	case err != nil && ctxDone(ctx):
		return nil, res, h.gaveUp(ctx, req, last)
	case err != nil:
		h.leave(req)
		return nil, res, fmt.Errorf("dlock: lock %q: %w", h.name, err)
	case res.lost:
		// The hold this re-entry was for is gone: the outer holds were
		// lost, whether or not another owner came in between.
		hd.lose(fmt.Errorf("%w: %q: gone when re-entered", ErrLockLost, h.name))
		return nil, res, fmt.Errorf("%w: %q: %w: the hold it re-enters is gone", ErrNotObtained, h.name, ErrLockLost)
	case res.acquired && time.Since(start) >= validity(req.lease):
		// The answer came after the lease it set had run out on our
		// clock (a long outage, a command re-sent after a restart): the
		// lock may be someone else's by now. Give it back and try again.
		grace(h.giveBack(req))
		return nil, attemptResult{reason: errLateReply}, nil
	case res.acquired:
		lockCtx, err := h.register(ctx, req, res.token, start)
		if err != nil {
			grace(h.giveBack(req))
		}
		return lockCtx, res, err
	}
	return nil, res, nil
}

// enter prepares an attempt by req's owner. When the owner holds the lock
// through this Client already, the attempt is a re-entry: enter marks req
// as one, with the hold's latest token, and returns the hold with its op
// taken, so that no Unlock releases the hold while the attempt is on its
// way. Otherwise enter waits until background work on the owner's earlier
// hold of this lock (a give-back, a release) is done, and returns nil. A
// fresh owner has neither. A handle made WithoutReentry refuses the
// re-entry with ErrNotReentrant: the owner would wait for itself.
func (h *handle) enter(ctx context.Context, req *request) (*hold, error) {
	for !req.fresh {
		hd := h.c.holds.held(h.holdKey(req.owner))
		if hd == nil {
			return nil, h.c.work.awaitIdle(ctx, h.holdKey(req.owner))
		}
		if h.cfg.noReentry {
			return nil, fmt.Errorf("%w: %q: the lock context holds it already", ErrNotReentrant, h.name)
		}
		if err := hd.lockOp(ctx); err != nil {
			return nil, err
		}
		if token, ok := h.c.holds.latest(hd); ok {
			req.reentry, req.token = true, token
			return hd, nil
		}
		hd.unlockOp() // released or lost meanwhile: look again
	}
	return nil, nil
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
// attempt failed, if the kind said. The owner leaves the kind's queue.
// When another lock context of this Client holds the lock, the error says
// so: a caller that meant to re-enter passed the wrong context.
func (h *handle) gaveUp(ctx context.Context, req request, last error) error {
	h.leave(req)
	err := ctxErr(ctx)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", err, cause) // an ended lock context: ErrUnlocked, ErrLockLost
	}
	if _, how := h.busyHere(req.owner); how == heldHere || how == heldSilent {
		last = errHeldHere
	}
	if last != nil {
		return fmt.Errorf("%w: %q: %w (%w)", ErrNotObtained, h.name, err, last)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, h.name, err)
}

// errHeldHere says why a Lock waited out its deadline on a lock that this
// Client holds.
var errHeldHere = errors.New("this Client holds the lock through another lock context; to re-enter, pass that lock context (or one derived from it) to Lock")

// holdKey names owner's hold on h's lock.
func (h *handle) holdKey(owner string) holdKey { return holdKey{h.kind.key(), h.kind.field(owner)} }
