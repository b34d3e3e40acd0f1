package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/watchdog"
)

// Observer receives a Client's events about its locks and synchronizers
// (Semaphore, PermitSemaphore, CountDownLatch), for metrics, traces or
// logs (module github.com/dlock-go/dlock/dlockotel turns them into
// OpenTelemetry metrics and spans). Every hook is optional: a nil hook is
// skipped, and a Client made without WithObserver does no observing work
// beyond one length check per event.
//
// A synchronizer's wait and hold are reported as a lock's, LockInfo.Kind
// telling them apart. The hooks each call fires:
//
//	Lock, TryLock (every lock kind)       LockStart, Wait per sleep, LockEnd
//	Unlock                                Unlocked
//	Semaphore Acquire, TryAcquire         LockStart, Wait per sleep, LockEnd
//	Semaphore Release                     Unlocked (Held unknown: negative)
//	PermitSemaphore Acquire, TryAcquire   LockStart, Wait per sleep, LockEnd
//	PermitSemaphore Release               Unlocked
//	CountDownLatch Await                  LockStart, Wait per sleep, LockEnd (OutcomeOpened)
//	a lock's hold or a permit ends        Lost
//	  without Unlock or Release
//	a watchdog renewal call               Renewal
//	a watchdog tick that fell behind      RenewalLag
//	a pub/sub connection reopened         Reconnect
//
// Each Semaphore Acquire is one hold (of its n permits), each Release the
// end of one; a PermitSemaphore's permit is a hold with a lease, lost like
// a lock's. A CountDownLatch Await is a wait with no hold after it. Other
// calls (AddPermits, DrainPermits, CountDown, ...) report nothing.
//
// Hooks run synchronously on the goroutine doing the work (a Lock's
// caller, an Unlock's caller, the watchdog, the pub/sub reader), possibly
// concurrently. They must return quickly, must not block, and must not
// call the Client's locks or Close.
type Observer struct {
	// LockStart is called when a Lock or TryLock (or a synchronizer's
	// Acquire, TryAcquire or Await) starts, once its arguments are
	// checked. The context it returns, if not nil, replaces ctx in this
	// call's Wait and LockEnd hooks (a tracer starts a span here); it
	// reaches neither Redis nor the lock context.
	LockStart func(ctx context.Context, l LockInfo) context.Context

	// Wait is called each time a Lock goes to sleep because another owner
	// holds the lock (a synchronizer's call: because no permit is free, or
	// the latch is closed). The first call (Round 1) is the start of its
	// wait.
	Wait func(ctx context.Context, l LockInfo, w WaitInfo)

	// LockEnd is called when a call that LockStart saw returns, with its
	// outcome.
	LockEnd func(ctx context.Context, l LockInfo, e LockEnd)

	// Unlocked is called when an Unlock releases an acquisition: the last
	// one of the owner's hold, which released the lock in Redis (Last), or
	// a re-entrant one; and when a Semaphore or PermitSemaphore Release
	// gives back permits (Last). It is not called for an Unlock or a
	// PermitSemaphore Release that found nothing to release (the hold was
	// released or lost before). ctx is the Unlock's or Release's context.
	Unlocked func(ctx context.Context, l LockInfo, u UnlockInfo)

	// Renewal is called after each renewal script call of the watchdog,
	// which renews up to WithRenewalBatchSize holds at once (the holds of
	// locks, or the permits of one PermitSemaphore).
	Renewal func(r RenewalInfo)

	// RenewalLag is called at the end of each watchdog tick that did not
	// renew every hold within its interval (a third of the watchdog
	// timeout): more holds than Redis renews in that time, or a node that
	// stopped answering. The next tick starts at once with the holds whose
	// renewal was sent longest ago; a hold is lost only when its own
	// lease runs out on the local clock. The Client also logs a warning.
	RenewalLag func(r RenewalLagInfo)

	// Lost is called when a hold (a lock's, or a PermitSemaphore's permit)
	// ends without an Unlock or Release: its lease ran out before it was
	// renewed, a renewal found it gone from Redis, or the Client was
	// closed. Its lock or permit contexts are cancelled right after.
	Lost func(l LockInfo, e LostInfo)

	// Reconnect is called when a pub/sub connection that waiters share is
	// found broken, silent or moved and is being opened again. Unlock
	// messages published meanwhile are lost: waiters retry at the end of
	// their sleep, or when the subscription is back.
	Reconnect func(r ReconnectInfo)
}

// WithObserver makes the Client report its events to o. It may be
// given more than once: every observer hears every event, in the order
// given. Without it the Client does no observing work.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if c.obs == nil {
			c.obs = &observers{since: map[any]time.Time{}}
		}
		c.obs.list = append(c.obs.list, &o)
	}
}

// observers are a Client's observers and what they need to remember.
type observers struct {
	list []*Observer
	mu   sync.Mutex
	// since is when each acquisition or permit that is held was taken
	// (from the return of its Lock or Acquire), for hold times.
	since map[any]time.Time
}

// Kinds of locks and synchronizers, as reported in LockInfo.Kind.
const (
	KindMutex     = "mutex"     // Mutex
	KindFair      = "fair"      // FairMutex
	KindSpin      = "spin"      // SpinLock
	KindRead      = "read"      // RWMutex's read lock
	KindWrite     = "write"     // RWMutex's write lock
	KindRedLock   = "redlock"   // RedLock (reported by its first node's Client)
	KindSemaphore = "semaphore" // Semaphore
	KindPermit    = "permit"    // PermitSemaphore
	KindLatch     = "latch"     // CountDownLatch
)

// LockInfo names the lock or synchronizer an event is about.
type LockInfo struct {
	Name string // the lock's or synchronizer's name
	Kind string // one of the Kind constants
	Try  bool   // the event belongs to a TryLock or TryAcquire (LockStart, LockEnd)
}

// WaitInfo describes one sleep of a waiting Lock.
type WaitInfo struct {
	// Round counts the sleeps of this Lock call: 1 when its wait starts.
	Round int
	// HolderTTL is how long the current hold had left when the attempt
	// before this sleep found the lock held (negative: the key has no
	// expiry). The sleep lasts at most that long, unless woken earlier.
	// For a PermitSemaphore it is how long the earliest held permit had
	// left (0: not known); for a Semaphore or a CountDownLatch, 0.
	HolderTTL time.Duration
}

// Outcome is how a Lock or TryLock (or a synchronizer's call) ended.
type Outcome string

// Outcomes of Lock and TryLock, and of the synchronizers' calls.
const (
	OutcomeAcquired Outcome = "acquired" // the lock (or a permit) is held
	OutcomeOpened   Outcome = "opened"   // CountDownLatch Await: the latch is open; no hold follows
	OutcomeBusy     Outcome = "busy"     // TryLock, TryAcquire: another owner holds it, no permit is free
	OutcomeTimeout  Outcome = "timeout"  // ctx's deadline passed first
	OutcomeCanceled Outcome = "canceled" // ctx was cancelled first
	OutcomeClosed   Outcome = "closed"   // the Client was closed
	OutcomeError    Outcome = "error"    // Redis failed, or a usage error
)

// LockEnd is the outcome of one Lock or TryLock (or synchronizer call).
type LockEnd struct {
	Outcome Outcome
	// Wait is how long the call took, from LockStart to its return.
	Wait time.Duration
	// Rounds is how many times the call slept (0: it never waited).
	Rounds int
	// Reentry is set when the owner already held the lock: the
	// acquisition only counted one more hold.
	Reentry bool
	// Err is the call's error, nil when acquired or opened (a Semaphore
	// TryAcquire that got nothing, which returns false, reports
	// ErrNotObtained).
	Err error
}

// UnlockInfo describes one released acquisition (or Release).
type UnlockInfo struct {
	// Held is how long the acquisition was held, from the return of its
	// Lock (or Acquire) to the Unlock (or Release). It is negative for a
	// Semaphore's Release: its permits have no owner, so the Acquire it
	// ends is not known.
	Held time.Duration
	// Last is set when the Unlock ended the owner's hold and released the
	// lock in Redis (always, for a Release); otherwise an inner re-entrant
	// hold was counted down.
	Last bool
	// Err is the Unlock's error. It wraps ErrNotHeld when Redis no longer
	// had the lock (or permit) at the release: it had been lost unnoticed.
	Err error
}

// RenewalInfo describes one renewal script call of the watchdog.
type RenewalInfo struct {
	Locks   int           // holds (or a PermitSemaphore's permits) the call renewed
	Lost    int           // of them, those Redis no longer had (each also reported by Lost)
	Latency time.Duration // the script call's round trip
	Err     error         // the call's error: every hold stays as it is until the next tick
}

// RenewalLagInfo describes a watchdog tick that did not renew every hold
// (and PermitSemaphore permit) within its interval.
type RenewalLagInfo struct {
	Left     int           // holds the tick did not renew in time: not sent, or not answered
	Holds    int           // holds the tick had to renew
	Oldest   time.Duration // the longest time since a hold's renewal was sent (or it was taken)
	Interval time.Duration // the watchdog's interval: each hold is due for renewal this often
}

// LostCause says why a hold ended without an Unlock.
type LostCause string

// Why holds are lost.
const (
	// LostExpired: the lease ran out on the local clock before a renewal
	// confirmed it (Redis unreachable, or a fixed lease that ran out).
	LostExpired LostCause = "expired"
	// LostRejected: a renewal found the hold gone from Redis (deleted,
	// force-unlocked, expired there, or taken by another owner; a permit
	// reclaimed or released by id).
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

// lockObs is the observed state of one Lock or TryLock call, or of a
// synchronizer's Acquire, TryAcquire or Await; a nil *lockObs (no
// observers) does nothing.
type lockObs struct {
	c      *Client
	ctx    context.Context
	info   LockInfo
	held   any     // the context key of what a success holds; nil: none
	got    Outcome // the outcome of a success
	start  time.Time
	rounds int
}

// observeLock starts observing a Lock or TryLock on h: LockStart. It
// returns nil when the Client has no observers.
func (c *Client) observeLock(ctx context.Context, h *handle, try bool) *lockObs {
	if !c.observing() {
		return nil
	}
	return c.observeWait(ctx, LockInfo{Name: h.name, Kind: h.kind.label(), Try: try}, h.acqKey, OutcomeAcquired)
}

// observeWait starts observing a call that may wait, described by l:
// LockStart. held is the key under which the context a success returns
// carries what it holds (nil: it returns none), got the Outcome of a
// success. It returns nil when the Client has no observers.
func (c *Client) observeWait(ctx context.Context, l LockInfo, held any, got Outcome) *lockObs {
	if !c.observing() {
		return nil
	}
	o := &lockObs{c: c, ctx: ctx, info: l, held: held, got: got, start: time.Now()}
	for _, ob := range c.cfg.obs.list {
		if ob.LockStart != nil {
			if octx := ob.LockStart(o.ctx, o.info); octx != nil {
				o.ctx = octx
			}
		}
	}
	return o
}

// sleeping reports a sleep of the call after an attempt that found the
// lock (or the permits, or the latch) taken: Wait.
func (o *lockObs) sleeping(res attemptResult) {
	if o == nil {
		return
	}
	o.sleep(res.ttl)
}

func (o *lockObs) sleep(holderTTL time.Duration) {
	o.rounds++
	w := WaitInfo{Round: o.rounds, HolderTTL: holderTTL}
	for _, ob := range o.c.cfg.obs.list {
		if ob.Wait != nil {
			ob.Wait(o.ctx, o.info, w)
		}
	}
}

// done reports the end of the call: LockEnd. lockCtx is the context it
// returned, if any.
func (o *lockObs) done(lockCtx context.Context, err error) {
	if o == nil {
		return
	}
	now := time.Now()
	e := LockEnd{Outcome: outcome(err), Wait: now.Sub(o.start), Rounds: o.rounds, Err: err}
	if err == nil {
		e.Outcome = o.got
		if held := valueOf(lockCtx, o.held); held != nil {
			e.Reentry = o.c.reentered(held)
			obs := o.c.cfg.obs
			obs.mu.Lock()
			obs.since[held] = now
			obs.mu.Unlock()
		}
	}
	for _, ob := range o.c.cfg.obs.list {
		if ob.LockEnd != nil {
			ob.LockEnd(o.ctx, o.info, e)
		}
	}
}

// returned reports the end of a call that returns no context (a
// Semaphore's Acquire, a latch's Await): LockEnd.
func (o *lockObs) returned(err error) {
	if o == nil {
		return
	}
	o.done(context.Background(), err)
}

// tried reports the end of a try that returns whether it succeeded (a
// Semaphore's TryAcquire): LockEnd, busy when it did not.
func (o *lockObs) tried(ok bool, err error) {
	if !ok && err == nil {
		err = ErrNotObtained
	}
	o.returned(err)
}

// valueOf returns ctx's value for key; nil when either is nil.
func valueOf(ctx context.Context, key any) any {
	if ctx == nil || key == nil {
		return nil
	}
	return ctx.Value(key)
}

// reentered reports whether held is a re-entrant acquisition: its owner
// held the lock already.
func (c *Client) reentered(held any) bool {
	acq, ok := held.(*acquisition)
	if !ok {
		return false
	}
	return c.holds.reentered(acq)
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
	held, ok := c.cfg.obs.untrack(acq)
	if !ok || errors.Is(*err, errReleased) || errors.Is(*err, errLost) {
		return
	}
	last := !c.holds.registered(acq.hold)
	u := UnlockInfo{Held: held, Last: last, Err: *err}
	c.unlocked(ctx, LockInfo{Name: h.name, Kind: h.kind.label()}, u)
}

// observeRelease reports a synchronizer's Release, described by l, of
// held (what its Acquire's context carried; nil: not known), that
// returned *err: Unlocked. It is deferred by Release, hence the pointer.
// A held that is not known (released or lost before) is not reported.
func (c *Client) observeRelease(ctx context.Context, l LockInfo, held any, err *error) {
	if !c.observing() {
		return
	}
	u := UnlockInfo{Held: -1, Last: true, Err: *err}
	if held != nil {
		d, ok := c.cfg.obs.untrack(held)
		if !ok {
			return
		}
		u.Held = d
	}
	c.unlocked(ctx, l, u)
}

func (c *Client) unlocked(ctx context.Context, l LockInfo, u UnlockInfo) {
	for _, ob := range c.cfg.obs.list {
		if ob.Unlocked != nil {
			ob.Unlocked(ctx, l, u)
		}
	}
}

// observeRenewal reports one renewal call of n holds or permits, sent at
// start, that answered alive (per entry: not lost) or err: Renewal.
func (c *Client) observeRenewal(n int, start time.Time, alive []bool, err error) {
	if !c.observing() {
		return
	}
	r := RenewalInfo{Locks: n, Latency: time.Since(start), Err: err}
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

// renewalLag reports a watchdog tick that fell behind: a warning in the
// log and RenewalLag.
func (c *Client) renewalLag(l watchdog.Lag) {
	r := RenewalLagInfo{Left: l.Left, Holds: l.Entries, Oldest: l.Oldest, Interval: c.cfg.watchdogTimeout / 3}
	c.cfg.logger.Warn("dlock: lease renewals are falling behind; the holds renewed longest ago go first",
		"left", r.Left, "holds", r.Holds, "oldest", r.Oldest, "interval", r.Interval)
	if !c.observing() {
		return
	}
	for _, ob := range c.cfg.obs.list {
		if ob.RenewalLag != nil {
			ob.RenewalLag(r)
		}
	}
}

// observeLost reports the loss of hd, whose acquisitions were acqs, with
// cause err, at at (by the Client's clock): Lost. A hold lost at or after
// its local deadline expired; one lost before it was found gone by the
// watchdog.
func (c *Client) observeLost(hd *hold, acqs []*acquisition, err error, at time.Time) {
	if !c.observing() {
		return
	}
	cause := LostRejected
	if !at.Before(c.holds.deadline(hd)) {
		cause = LostExpired
	}
	c.lost(hd, acqs, cause, err)
}

// observeClosed reports the holds that Close ended: Lost.
func (c *Client) observeClosed(holds []*hold) {
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
		if held, ok := c.cfg.obs.untrack(a); ok {
			e.Held = max(e.Held, held)
		}
	}
	c.reportLost(LockInfo{Name: hd.kind.key(), Kind: hd.kind.label()}, e)
}

// observeLoss reports that held (a permit), described by l, ended with
// err without a Release: Lost. expired says its lease had run out on the
// local clock; an err wrapping ErrClosed is a loss to Close.
func (c *Client) observeLoss(l LockInfo, held any, expired bool, err error) {
	if !c.observing() {
		return
	}
	e := LostInfo{Cause: LostRejected, Acquisitions: 1, Err: err}
	switch {
	case errors.Is(err, ErrClosed):
		e.Cause = LostClosed
	case expired:
		e.Cause = LostExpired
	}
	e.Held, _ = c.cfg.obs.untrack(held)
	c.reportLost(l, e)
}

func (c *Client) reportLost(l LockInfo, e LostInfo) {
	for _, ob := range c.cfg.obs.list {
		if ob.Lost != nil {
			ob.Lost(l, e)
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

// untrack returns how long acq (an acquisition or a permit) has been held
// and forgets it; ok is false when it was not known (or forgotten
// already).
func (o *observers) untrack(acq any) (held time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	since, ok := o.since[acq]
	if ok {
		delete(o.since, acq)
		held = time.Since(since)
	}
	return held, ok
}
