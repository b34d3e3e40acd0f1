package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Observer receives a Client's lock events, for metrics, traces or logs
// (module github.com/dlock-go/dlock/dlockotel turns them into OpenTelemetry
// metrics and spans). Every hook is optional: a nil hook is skipped, and a
// Client made without WithObserver does no observing work beyond one
// length check per event.
//
// Hooks run synchronously on the goroutine doing the work (a Lock's
// caller, an Unlock's caller, the watchdog, the pub/sub reader), possibly
// concurrently. They must return quickly, must not block, and must not
// call the Client's locks or Close.
type Observer struct {
	// LockStart is called when a Lock or TryLock starts, once its
	// arguments are checked. The context it returns, if not nil, replaces
	// ctx in this call's Wait and LockEnd hooks (a tracer starts a span
	// here); it reaches neither Redis nor the lock context.
	LockStart func(ctx context.Context, l LockInfo) context.Context

	// Wait is called each time a Lock goes to sleep because another owner
	// holds the lock. The first call (Round 1) is the start of its wait.
	Wait func(ctx context.Context, l LockInfo, w WaitInfo)

	// LockEnd is called when a Lock or TryLock that LockStart saw returns,
	// with its outcome.
	LockEnd func(ctx context.Context, l LockInfo, e LockEnd)

	// Unlocked is called when an Unlock releases an acquisition: the last
	// one of the owner's hold, which released the lock in Redis (Last), or
	// a re-entrant one. It is not called for an Unlock that found nothing
	// to release (the hold was released or lost before). ctx is the
	// Unlock's context.
	Unlocked func(ctx context.Context, l LockInfo, u UnlockInfo)

	// Renewal is called after each renewal script call of the watchdog,
	// which renews up to WithRenewalBatchSize holds at once.
	Renewal func(r RenewalInfo)

	// Lost is called when a hold ends without an Unlock: its lease ran out
	// before it was renewed, the watchdog found it gone from Redis, or the
	// Client was closed. Its lock contexts are cancelled right after.
	Lost func(l LockInfo, e LostInfo)

	// Reconnect is called when a pub/sub connection that waiters share is
	// found broken, silent or moved and is being opened again. Unlock
	// messages published meanwhile are lost: waiters retry at the end of
	// their sleep, or when the subscription is back.
	Reconnect func(r ReconnectInfo)
}

// WithObserver makes the Client report its lock events to o. It may be
// given more than once: every observer hears every event, in the order
// given. Without it the Client does no observing work.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if c.obs == nil {
			c.obs = &observers{since: map[*acquisition]time.Time{}}
		}
		c.obs.list = append(c.obs.list, &o)
	}
}

// observers are a Client's observers and what they need to remember.
type observers struct {
	list []*Observer
	mu   sync.Mutex
	// since is when each acquisition that is held was taken (from the
	// return of its Lock), for hold times.
	since map[*acquisition]time.Time
}

// Lock kinds, as reported in LockInfo.Kind.
const (
	KindMutex   = "mutex"   // Mutex
	KindFair    = "fair"    // FairMutex
	KindRead    = "read"    // RWMutex's read lock
	KindWrite   = "write"   // RWMutex's write lock
	KindRedLock = "redlock" // RedLock (reported by its first node's Client)
)

// LockInfo names the lock an event is about.
type LockInfo struct {
	Name string // the lock's name
	Kind string // KindMutex, KindFair, KindRead, KindWrite or KindRedLock
	Try  bool   // the event belongs to a TryLock (LockStart, LockEnd)
}

// WaitInfo describes one sleep of a waiting Lock.
type WaitInfo struct {
	// Round counts the sleeps of this Lock call: 1 when its wait starts.
	Round int
	// HolderTTL is how long the current hold had left when the attempt
	// before this sleep found the lock held (negative: the key has no
	// expiry). The sleep lasts at most that long, unless woken earlier.
	HolderTTL time.Duration
}

// Outcome is how a Lock or TryLock ended.
type Outcome string

// Outcomes of Lock and TryLock.
const (
	OutcomeAcquired Outcome = "acquired" // the lock is held
	OutcomeBusy     Outcome = "busy"     // TryLock: another owner holds it
	OutcomeTimeout  Outcome = "timeout"  // ctx's deadline passed first
	OutcomeCanceled Outcome = "canceled" // ctx was cancelled first
	OutcomeClosed   Outcome = "closed"   // the Client was closed
	OutcomeError    Outcome = "error"    // Redis failed, or a usage error
)

// LockEnd is the outcome of one Lock or TryLock.
type LockEnd struct {
	Outcome Outcome
	// Wait is how long the call took, from LockStart to its return.
	Wait time.Duration
	// Rounds is how many times the call slept (0: it never waited).
	Rounds int
	// Reentry is set when the owner already held the lock: the
	// acquisition only counted one more hold.
	Reentry bool
	// Err is the call's error, nil when acquired.
	Err error
}

// UnlockInfo describes one released acquisition.
type UnlockInfo struct {
	// Held is how long the acquisition was held, from the return of its
	// Lock to the Unlock.
	Held time.Duration
	// Last is set when the Unlock ended the owner's hold and released the
	// lock in Redis; otherwise an inner re-entrant hold was counted down.
	Last bool
	// Err is the Unlock's error. It wraps ErrNotHeld when Redis no longer
	// had the lock at the release: it had been lost unnoticed.
	Err error
}

// RenewalInfo describes one renewal script call of the watchdog.
type RenewalInfo struct {
	Locks   int           // holds the call renewed
	Lost    int           // of them, holds Redis no longer had (each also reported by Lost)
	Latency time.Duration // the script call's round trip
	Err     error         // the call's error: every hold stays as it is until the next tick
}

// LostCause says why a hold ended without an Unlock.
type LostCause string

// Why holds are lost.
const (
	// LostExpired: the lease ran out on the local clock before a renewal
	// confirmed it (Redis unreachable, or a fixed lease that ran out).
	LostExpired LostCause = "expired"
	// LostRejected: the watchdog found the hold gone from Redis (deleted,
	// force-unlocked, expired there, or taken by another owner).
	LostRejected LostCause = "rejected"
	// LostClosed: the Client was closed with the hold still held; the lock
	// expires in Redis with its lease.
	LostClosed LostCause = "closed"
)

// LostInfo describes a lost hold.
type LostInfo struct {
	Cause LostCause
	// Held is how long the hold had been held, from the return of its
	// first Lock.
	Held time.Duration
	// Acquisitions is how many acquisitions (re-entries included) the hold
	// had when it was lost.
	Acquisitions int
	// Err is the cause the hold's lock contexts are cancelled with.
	Err error
}

// ReconnectInfo describes a pub/sub connection being opened again.
type ReconnectInfo struct {
	Err error // what was found wrong with the connection
}

// observing reports whether the Client has observers.
func (c *Client) observing() bool { return c.cfg.obs != nil }

// lockObs is the observed state of one Lock or TryLock call; a nil
// *lockObs (no observers) does nothing.
type lockObs struct {
	h      *handle
	ctx    context.Context
	info   LockInfo
	start  time.Time
	rounds int
}

// observeLock starts observing a Lock or TryLock on h: LockStart. It
// returns nil when the Client has no observers.
func (c *Client) observeLock(ctx context.Context, h *handle, try bool) *lockObs {
	if !c.observing() {
		return nil
	}
	o := &lockObs{h: h, ctx: ctx, info: LockInfo{Name: h.name, Kind: kindName(h.kind), Try: try}, start: time.Now()}
	for _, ob := range c.cfg.obs.list {
		if ob.LockStart != nil {
			if octx := ob.LockStart(o.ctx, o.info); octx != nil {
				o.ctx = octx
			}
		}
	}
	return o
}

// sleeping reports a sleep of the Lock after an attempt that found the
// lock held: Wait.
func (o *lockObs) sleeping(res attemptResult) {
	if o == nil {
		return
	}
	o.rounds++
	w := WaitInfo{Round: o.rounds, HolderTTL: res.ttl}
	for _, ob := range o.h.c.cfg.obs.list {
		if ob.Wait != nil {
			ob.Wait(o.ctx, o.info, w)
		}
	}
}

// done reports the end of the Lock: LockEnd.
func (o *lockObs) done(lockCtx context.Context, err error) {
	if o == nil {
		return
	}
	now := time.Now()
	e := LockEnd{Outcome: outcome(err), Wait: now.Sub(o.start), Rounds: o.rounds, Err: err}
	if err == nil && lockCtx != nil {
		h := o.h
		if acq, ok := lockCtx.Value(h.acqKey).(*acquisition); ok {
			h.c.mu.Lock()
			e.Reentry = len(acq.hold.acqs) > 0 && acq.hold.acqs[0] != acq
			h.c.mu.Unlock()
			obs := h.c.cfg.obs
			obs.mu.Lock()
			obs.since[acq] = now
			obs.mu.Unlock()
		}
	}
	for _, ob := range o.h.c.cfg.obs.list {
		if ob.LockEnd != nil {
			ob.LockEnd(o.ctx, o.info, e)
		}
	}
}

// outcome classifies a Lock's error.
func outcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, ErrClosed):
		return OutcomeClosed
	case errors.Is(err, ErrNotObtained):
		return OutcomeBusy
	}
	return OutcomeError
}

// observeUnlock reports an Unlock of acq on h that returned *err:
// Unlocked. It is deferred by Unlock, hence the pointer.
func (c *Client) observeUnlock(ctx context.Context, h *handle, acq *acquisition, err *error) {
	if !c.observing() {
		return
	}
	held, ok := c.cfg.obs.forget(acq)
	if !ok || errors.Is(*err, errReleased) || errors.Is(*err, errLost) {
		return
	}
	c.mu.Lock()
	last := !c.registered(acq.hold)
	c.mu.Unlock()
	u := UnlockInfo{Held: held, Last: last, Err: *err}
	info := LockInfo{Name: h.name, Kind: kindName(h.kind)}
	for _, ob := range c.cfg.obs.list {
		if ob.Unlocked != nil {
			ob.Unlocked(ctx, info, u)
		}
	}
}

// observeRenewal reports one renewal call of holds, sent at start, that
// answered alive or err: Renewal.
func (c *Client) observeRenewal(holds []*hold, start time.Time, alive []bool, err error) {
	if !c.observing() {
		return
	}
	r := RenewalInfo{Locks: len(holds), Latency: time.Since(start), Err: err}
	for _, a := range alive {
		if !a {
			r.Lost++
		}
	}
	for _, ob := range c.cfg.obs.list {
		if ob.Renewal != nil {
			ob.Renewal(r)
		}
	}
}

// observeLost reports the loss of hd, whose acquisitions were acqs, with
// cause err: Lost. A hold lost at or after its local deadline expired;
// one lost before it was found gone by the watchdog.
func (c *Client) observeLost(hd *hold, acqs []*acquisition, err error) {
	if !c.observing() {
		return
	}
	c.mu.Lock()
	cause := LostRejected
	if !time.Now().Before(hd.until) {
		cause = LostExpired
	}
	c.mu.Unlock()
	c.lost(hd, acqs, cause, err)
}

// observeClosed reports the holds that Close ended: Lost.
func (c *Client) observeClosed(holds map[holdKey]*hold) {
	if !c.observing() {
		return
	}
	for _, hd := range holds {
		c.lost(hd, hd.acqs, LostClosed, ErrClosed)
	}
}

func (c *Client) lost(hd *hold, acqs []*acquisition, cause LostCause, err error) {
	e := LostInfo{Cause: cause, Acquisitions: len(acqs), Err: err}
	for _, a := range acqs {
		if held, ok := c.cfg.obs.forget(a); ok {
			e.Held = max(e.Held, held)
		}
	}
	info := LockInfo{Name: hd.kind.key(), Kind: kindName(hd.kind)}
	for _, ob := range c.cfg.obs.list {
		if ob.Lost != nil {
			ob.Lost(info, e)
		}
	}
}

// observeReconnect reports a pub/sub connection opened again: Reconnect.
func (c *Client) observeReconnect(err error) {
	if !c.observing() {
		return
	}
	for _, ob := range c.cfg.obs.list {
		if ob.Reconnect != nil {
			ob.Reconnect(ReconnectInfo{Err: err})
		}
	}
}

// forget returns how long acq has been held and forgets it; ok is false
// when it was not known (or forgotten already).
func (o *observers) forget(acq *acquisition) (held time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	since, ok := o.since[acq]
	if ok {
		delete(o.since, acq)
		held = time.Since(since)
	}
	return held, ok
}

// kindName is the Kind reported for k.
func kindName(k kind) string {
	switch k.(type) {
	case *mutexKind:
		return KindMutex
	case *fairKind:
		return KindFair
	case *readKind:
		return KindRead
	case *writeKind:
		return KindWrite
	case *redKind:
		return KindRedLock
	default:
		return "other"
	}
}
