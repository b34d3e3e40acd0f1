package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// pollNoExpiry is how often a waiter retries a lock whose key has no TTL
// (not one dlock or Redisson wrote) when no unlock message comes.
const pollNoExpiry = time.Second

// acquire takes the lock for the owner in ctx (or a new owner), waiting
// unless try is set. Each round is one attempt (attemptOnce) and, while
// another owner holds the lock, one sleep (waiter.sleep). Waiting is push:
// the waiter subscribes to the lock's channel and sleeps until an unlock
// message or until the current hold's lease runs out, whichever is first,
// so a lost message costs at most one lease, never a hang. acquire returns
// by ctx's deadline whatever Redis does: cleanup goes on in the background.
func (h *handle) acquire(ctx context.Context, try bool) (lockCtx context.Context, err error) {
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	req, err := h.request(ctx, try)
	if err != nil {
		return nil, err
	}
	w := waiter{h: h, req: req, hands: h.handsOver(req)}
	defer w.stop()
	ob := h.c.observeLock(ctx, h, try) // observe.go; nil without observers
	defer func() { ob.done(lockCtx, err) }()
	for round := 0; ; round++ {
		lockCtx, res, err := w.attemptFirst(ctx, round == 0 && !try)
		w.req.fresh = false // an attempt may leave background work on the owner's hold
		switch {
		case lockCtx != nil:
			w.acquired = true
			return lockCtx, nil
		case errors.Is(err, ErrUnreachable) && !try && reachGate(h.c, h.kind).Wait(ctx):
			continue // Redis is back: try again at once
		case err != nil:
			return nil, err
		case try:
			return nil, notObtained(h.name, res.reason)
		}
		ob.sleeping(res)
		g, err := w.sleep(ctx, res)
		switch {
		case err != nil:
			return nil, err
		case g.ok && time.Since(g.start) >= validity(h.kind, req.lease):
			h.giveBack(req) // handed over too late to be worth anything: try again
		case g.ok: // handed over by a release of this Client
			lockCtx, err := h.c.register(ctx, h, req, g.token, g.start)
			if err != nil {
				h.giveBack(req)
			}
			return lockCtx, err
		}
	}
}

// request returns the request of a Lock or TryLock with ctx: the owner in
// ctx or a new one, and the handle's lease. A re-entry must set the lease
// its hold was taken with: one hash key has one expiry, and another lease
// would shorten or stretch the outer holds' lease behind their back.
func (h *handle) request(ctx context.Context, try bool) (request, error) {
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
	if hd := h.c.held(h, owner); hd != nil && (hd.lease != req.lease || hd.watchdog == h.cfg.hasLease) {
		return req, fmt.Errorf("%w: %q: re-entered with a lease (%v, watchdog %v) other than the one it is held with (%v, watchdog %v)",
			ErrInvalidOption, h.name, req.lease, !h.cfg.hasLease, hd.lease, hd.watchdog)
	}
	return req, nil
}

// attemptOnce makes one attempt for req and, when it succeeds, registers
// the hold and returns its lock context. When another owner holds the
// lock it returns the attempt's result for the wait; last is why the
// previous attempt failed, for the error if ctx ends now.
func (h *handle) attemptOnce(ctx context.Context, req request, last error) (context.Context, attemptResult, error) {
	var hd *hold
	if !req.fresh {
		var err error
		if hd, err = h.enter(ctx, req.owner); err != nil {
			return nil, attemptResult{}, h.gaveUp(ctx, req, last)
		}
	}
	done := func() {} // called once the attempt has finished
	if hd != nil {
		req.reentry, req.token, done = true, h.c.lastToken(hd), hd.unlockOp
	}
	start := time.Now()
	res, left, err := h.call(ctx, req, done)
	if !left {
		defer done()
	}
	switch {
	case err != nil && ctxDone(ctx):
		return nil, res, h.gaveUp(ctx, req, last)
	case err != nil:
		h.leave(req)
		return nil, res, fmt.Errorf("dlock: lock %q: %w", h.name, err)
	case res.lost:
		// The hold this re-entry was for is gone: the outer holds were
		// lost, whether or not another owner came in between.
		h.c.lose(hd, fmt.Errorf("%w: %q: gone when re-entered", ErrLockLost, h.name))
		return nil, res, fmt.Errorf("%w: %q: %w: the hold it re-enters is gone", ErrNotObtained, h.name, ErrLockLost)
	case res.acquired && time.Since(start) >= validity(h.kind, req.lease):
		// The answer came after the lease it set had run out on our
		// clock (a long outage, a command re-sent after a restart): the
		// lock may be someone else's by now. Give it back and try again.
		h.giveBack(req)
		return nil, attemptResult{reason: errLateReply}, nil
	case res.acquired:
		lockCtx, err := h.c.register(ctx, h, req, res.token, start)
		if err != nil {
			h.giveBack(req)
		}
		return lockCtx, res, err
	}
	return nil, res, nil
}

// attemptFirst is attemptOnce, except for the first attempt of a Lock on a
// lock that hands over and that this Client is busy with already: there
// the Lock goes straight to waiting its turn without asking Redis (later
// attempts do ask: the local hold may have been lost). When another owner
// of this Client holds the lock, the attempt would fail. When other
// Locks of this Client wait for it, subscribed, they are ahead, and a
// release reaches this Lock through them: the Lock joins them without
// the attempt that follows a new subscription.
func (w *waiter) attemptFirst(ctx context.Context, first bool) (context.Context, attemptResult, error) {
	h := w.h
	if first && w.hands {
		switch d, how := h.c.busyHere(h, w.req.owner); how {
		case heldHere:
			return nil, attemptResult{ttl: max(d, time.Millisecond)}, nil
		case waitedHere:
			w.joined = true
			return nil, attemptResult{ttl: d}, nil
		}
	}
	return h.attemptOnce(ctx, w.req, w.last)
}

// enter prepares an attempt by owner. When owner holds the lock through
// this Client already, the attempt is a re-entry: enter returns the hold
// with its op taken, so that no Unlock releases the hold while the attempt
// is on its way. Otherwise enter waits until background work on the
// owner's earlier hold of this lock (a give-back, a release) is done, and
// returns nil.
func (h *handle) enter(ctx context.Context, owner string) (*hold, error) {
	for {
		hd := h.c.held(h, owner)
		if hd == nil {
			return nil, h.c.awaitIdle(ctx, holdKey{h.kind.key(), h.kind.field(owner)})
		}
		if err := hd.lockOp(ctx); err != nil {
			return nil, err
		}
		h.c.mu.Lock()
		ok := h.c.registered(hd)
		h.c.mu.Unlock()
		if ok {
			return hd, nil
		}
		hd.unlockOp() // released or lost meanwhile: look again
	}
}

// reply is the outcome of one attempt.
type reply struct {
	res attemptResult
	err error
}

// call runs one attempt (attemptSynced). The attempt runs on the
// caller's goroutine when it cannot outlast ctx: when ctx cannot end, or
// when it has a deadline and the Client's Redis client ends every request
// by its ctx's deadline (honoursDeadlines: go-redis's
// ContextTimeoutEnabled; the batcher then sends such scripts alone, never
// behind another's batch). A ctx cancelled before its deadline is then
// noticed when the attempt's round trip is over, which on a frozen server
// is the deadline. Otherwise (a cluster client, a ctx
// with no deadline that can be cancelled) the attempt runs on its own
// goroutine and call returns when ctx ends, if that comes first, even on a
// Redis client that ignores ctx: the attempt goes on in the background
// (left is true), what it took is given back there, and done is called
// when it has finished. Handing an attempt to another goroutine and back
// costs more than the attempt's own work in the client.
func (h *handle) call(ctx context.Context, req request, done func()) (res attemptResult, left bool, err error) {
	if ctx.Done() == nil || h.c.deadlines && hasDeadline(ctx) {
		res, err = h.attemptSynced(ctx, req)
		return res, false, err
	}
	replied := make(chan reply, 1)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	h.c.runners.run(func() {
		defer cancel()
		res, err := h.attemptSynced(actx, req)
		replied <- reply{res, err}
	})
	select {
	case r := <-replied:
		return r.res, false, r.err
	case <-ctx.Done():
		h.c.background(h.holdKey(req.owner), func(context.Context) {
			defer done()
			if r := <-replied; r.err == nil && r.res.acquired {
				h.giveBack(req)
			}
			h.leave(req) // the attempt may have queued the owner after gaveUp took it out
		})
		return attemptResult{}, true, ctxErr(ctx)
	}
}

// runners runs the attempts that call hands over on goroutines kept
// between attempts, up to maxIdleRunners idle ones: a new goroutine's
// stack would be grown (copied) again by the Redis client's deep calls at
// every attempt, which costs more than starting the goroutine.
type runners struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
}

// maxIdleRunners bounds the goroutines kept idle for attempts.
const maxIdleRunners = 16

// run runs f on an idle runner or a new goroutine.
func (rs *runners) run(f func()) {
	rs.mu.Lock()
	if n := len(rs.idle); n > 0 {
		r := rs.idle[n-1]
		rs.idle = rs.idle[:n-1]
		rs.mu.Unlock()
		r <- f // buffered: never blocks
		return
	}
	rs.mu.Unlock()
	r := make(chan func(), 1)
	r <- f
	go rs.loop(r)
}

// loop runs the functions handed to r, waiting idle in between, until
// the runners are closed or enough others wait.
func (rs *runners) loop(r chan func()) {
	for f := range r {
		f()
		rs.mu.Lock()
		if rs.closed || len(rs.idle) >= maxIdleRunners {
			rs.mu.Unlock()
			return
		}
		rs.idle = append(rs.idle, r)
		rs.mu.Unlock()
	}
}

// close ends the idle runners; later attempts get goroutines of their own.
func (rs *runners) close() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.closed = true
	for _, r := range rs.idle {
		close(r)
	}
	rs.idle = nil
}

// attemptSynced makes one attempt. A hold it took that did not reach
// enough replicas (WithReplicaSync) is given back, and the error wraps
// ErrNotReplicated. An attempt that failed without an answer may have run
// all the same: what it may have taken is given back too.
func (h *handle) attemptSynced(ctx context.Context, req request) (attemptResult, error) {
	if h.c.cfg.replicas.enabled() {
		req.check = new(transport.Check)
	}
	gate := reachGate(h.c, h.kind)
	res, err := attemptResult{}, gate.Err() // Redis unreachable: do not dial
	sent := err == nil
	if sent {
		res, err = h.kind.attempt(ctx, req)
		err = gate.Saw(err) // a failed dial is ErrUnreachable from the first call on
	}
	if err != nil {
		// An attempt not sent took nothing, but a hand-over to a
		// queued Lock whose answer was lost may have made the owner
		// the holder: that is given back too.
		if sent || req.queued {
			done := h.startGiveBack(req)
			if ctx.Err() == nil { // a caller out of time does not wait for it
				grace(done)
			}
		}
		return res, err
	}
	if short := req.check.Failed(); res.acquired && short != nil {
		h.giveBack(req)
		return attemptResult{}, short
	}
	return res, nil
}

// giveBack releases, in the background, a hold that an attempt may have
// taken but the caller will not get, and waits cleanupGrace for it. A
// re-entry took nothing the owner did not hold already.
func (h *handle) giveBack(req request) { grace(h.startGiveBack(req)) }

// startGiveBack starts giveBack's work and returns a channel closed when
// it is done.
func (h *handle) startGiveBack(req request) <-chan struct{} {
	if req.reentry {
		return closedChan
	}
	// The attempt may have run and set the lease, its reply lost with the
	// connection (a Redis restart): a give-back that fails for a reason
	// that may pass is sent again, as a release is (releaseRetry), until
	// that lease has run out, or the lock would stay taken for a lease.
	until := time.Now().Add(validity(h.kind, req.lease))
	return h.c.background(h.holdKey(req.owner), func(ctx context.Context) {
		send := func(ctx context.Context) error {
			_, err := h.kind.release(ctx, req)
			return err
		}
		if _, err := h.resend(ctx, until, nil, send); err != nil {
			// Redis unreachable all along: the attempt almost surely took
			// nothing, and an outage is reported elsewhere.
			level := slog.LevelWarn
			if errors.Is(err, ErrUnreachable) || transport.DialFailed(err) {
				level = slog.LevelDebug
			}
			h.c.cfg.logger.Log(ctx, level, "dlock: a failed attempt may have taken the lock; giving it back failed, so it expires with its lease", "lock", h.name, "error", err)
		}
	})
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// leave takes a waiter that stopped waiting out of the kind's queue, for
// kinds that keep one (the fair lock), in the background, and waits
// cleanupGrace for it.
func (h *handle) leave(req request) {
	a, ok := h.kind.(abandoner)
	if !ok || !req.wait {
		return
	}
	grace(h.c.background(h.holdKey(req.owner), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		defer cancel()
		if err := a.abandon(ctx, req); err != nil {
			h.c.cfg.logger.Warn("dlock: leaving the wait queue failed", "lock", h.name, "error", err)
		}
	}))
}

// holdKey names owner's hold on h's lock.
func (h *handle) holdKey(owner string) holdKey { return holdKey{h.kind.key(), h.kind.field(owner)} }

// waiter is the waiting side of a Lock: the subscription to the lock's
// channel, made at the first sleep, the timer that bounds each sleep, and
// the Lock's place in this Client's queue for the lock (handoff.go).
type waiter struct {
	h        *handle
	req      request
	hands    bool   // the kind hands over: the Lock waits in a place
	place    *place // made at the first sleep when hands is set
	sub      *pubsub.Waiter
	timer    *time.Timer
	last     error // why the latest attempt failed, when the kind says
	acquired bool  // the Lock succeeded: a wake-up it had was used
	joined   bool  // joined subscribed waiters of this Client: no attempt after subscribing
}

// sleep waits after an attempt that found the lock held: until an unlock
// message, the end of the current hold's lease (res.ttl), a hand-over from
// a release of this Client, or the end of ctx. The first sleep subscribes
// and ends when the subscription is confirmed, since the unlock may have
// been published before. The grant is ok when the lock was handed over.
func (w *waiter) sleep(ctx context.Context, res attemptResult) (grant, error) {
	h := w.h
	w.last = res.reason
	d := res.ttl
	if d < 0 {
		d = pollNoExpiry
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	wake, err := w.wakeUps(ctx)
	if err != nil {
		return grant{}, err
	}
	if g := w.wait(ctx, wake); g.ok {
		return g, nil // the lock is ours even if ctx ended meanwhile
	}
	switch {
	case ctxDone(ctx):
		return grant{}, h.gaveUp(ctx, w.req, w.last)
	case h.c.isClosed():
		// The Redis client may still work: leave the queue rather than
		// hold it up like a dead process until our deadline.
		h.leave(w.req)
		return grant{}, ErrClosed
	}
	return grant{}, nil
}

// subscribe subscribes to channel through the Client's hub. Opening the
// hub's connection to a server that does not answer can take the Redis
// client's dial and read timeouts whatever ctx says, so when ctx can end,
// subscribe returns when it ends, and a subscription made after that is
// closed in the background.
func (w *waiter) subscribe(ctx context.Context, channel string) (*pubsub.Waiter, error) {
	hub := w.h.c.hub
	if ctx.Done() == nil {
		return hub.Subscribe(ctx, channel)
	}
	type result struct {
		sub *pubsub.Waiter
		err error
	}
	done := make(chan result, 1)
	go func() {
		sub, err := hub.Subscribe(ctx, channel)
		done <- result{sub, err}
	}()
	select {
	case r := <-done:
		return r.sub, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.sub != nil {
				r.sub.Close(false)
			}
		}()
		return nil, ctx.Err()
	}
}

// wait sleeps in the lock's queue, if the kind hands over, until wake
// (see wakeUps: Ready at the first sleep, then the unlock messages), the
// timer, a hand-over or the end of ctx. A release of this Client that
// chose the waiter but freed the lock instead, for other processes' turn,
// puts it back in the queue if it was not woken already: it then waits
// for the unlock message like the waiters of every other process, rather
// than race them from up close. A waiter that wake or the timer woke
// before it was told of the free returns at once, to try again: the
// message it would wait for came already.
func (w *waiter) wait(ctx context.Context, wake <-chan struct{}) grant {
	if w.hands && w.place == nil {
		w.place = w.h.newPlace(w.req)
		w.req.queued = true
	}
	for {
		var granted <-chan grant
		if w.place != nil {
			w.h.c.enqueue(w.h, w.place)
			granted = w.place.grant
		}
		var g grant
		woken := false // by wake (Ready at the first sleep, else the unlock message) or the timer: used up
		select {
		case <-wake:
			woken = true
		case <-w.timer.C:
			woken = true
		case g = <-granted:
		case <-ctx.Done():
		case <-w.h.c.done: // Close: a first sleep waits on Ready, which may never come
		}
		if !g.ok && !g.freed && w.place != nil {
			g = w.handedOver(ctx)
		}
		// A free told after the wake-up that came with it: waiting again
		// would wait for a message that came already (and a timer that
		// fired), with the lock free.
		if !g.freed || woken || ctxDone(ctx) {
			return g
		}
	}
}

// wakeUps returns the channel that wakes the waiter: nil for a kind
// without unlock messages (only the timer wakes it); at the first sleep,
// the new subscription's Ready (unless the Lock joined subscribed waiters
// of this Client); after that, the unlock messages.
func (w *waiter) wakeUps(ctx context.Context) (<-chan struct{}, error) {
	h := w.h
	ch := h.kind.channel(w.req.owner)
	switch {
	case ch == "":
		return nil, nil
	case w.sub != nil:
		if w.place != nil {
			h.c.mu.Lock()
			w.place.subscribed = true
			h.c.mu.Unlock()
		}
		return w.sub.Wake(), nil
	}
	sub, err := w.subscribe(ctx, ch)
	switch {
	case err == nil:
		w.sub = sub
		if w.joined {
			return sub.Wake(), nil
		}
		return sub.Ready(), nil
	case ctxDone(ctx):
		// Also when ctx's timer has yet to fire: a dial or socket
		// deadline at ctx's deadline can fail the subscription first.
		return nil, h.gaveUp(ctx, w.req, w.last)
	case errors.Is(err, pubsub.ErrClosed):
		return nil, ErrClosed // Close raced this Lock
	}
	h.leave(w.req)
	return nil, fmt.Errorf("dlock: lock %q: subscribe: %w", h.name, err)
}

// handedOver takes the waiter out of its lock's queue after a sleep and
// returns the outcome of a hand-over that chose it meanwhile, if any. When
// ctx ends while the hand-over is still on its way, a lock it hands over
// is given back in the background.
func (w *waiter) handedOver(ctx context.Context) grant {
	h := w.h
	if !h.c.dequeue(h, w.place) {
		select {
		case g := <-w.place.grant: // told before we woke
			return g
		default:
			return grant{}
		}
	}
	select {
	case g := <-w.place.grant:
		return g
	case <-ctx.Done():
		h.c.background(h.holdKey(w.req.owner), func(context.Context) {
			if g := <-w.place.grant; g.ok || g.unknown {
				h.giveBack(w.req)
			}
		})
		return grant{}
	}
}

// stop ends the wait: the subscription goes, passing on a wake-up that a
// Lock that failed did not use.
func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.sub != nil {
		w.sub.Close(w.acquired)
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
// attempt failed, if the kind said. The owner leaves the kind's queue.
// When another lock context of this Client holds the lock, the error says
// so: a caller that meant to re-enter passed the wrong context.
func (h *handle) gaveUp(ctx context.Context, req request, last error) error {
	h.leave(req)
	err := ctxErr(ctx)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w: %w", err, cause) // an ended lock context: ErrUnlocked, ErrLockLost
	}
	if _, how := h.c.busyHere(h, req.owner); how == heldHere {
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

// honoursDeadlines reports whether rdb ends every request by its ctx's
// deadline: a plain *redis.Client with ContextTimeoutEnabled that sets
// socket deadlines (ReadTimeout and WriteTimeout not -2). go-redis's
// default ignores ctx for socket I/O. A cluster client is not counted
// (it may reload its slot map on its own terms), nor a Sentinel failover
// client (it asks its sentinels, with their options, when it dials).
func honoursDeadlines(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return false
	}
	opt := c.Options()
	return opt.ContextTimeoutEnabled && opt.Addr != failoverAddr && opt.ReadTimeout >= 0 && opt.WriteTimeout >= 0
}
