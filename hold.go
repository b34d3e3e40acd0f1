package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// The holds of a Client's owners, and the registry that records them: what
// Lock registers, Unlock drops, the watchdog renews and a loss ends. Redis
// has the truth of every hold; the registry has what the Client needs to
// answer without asking it (a re-entry, a hold count, a local deadline)
// and the lock contexts to end when a hold goes.

// lockKey names a lock of a Client: its key and role (the halves of a
// read-write lock share a key).
type lockKey struct{ key, role string }

// holdKey names one owner's hold on one lock.
type holdKey struct {
	key, field string
}

// hold is what the Client knows of one owner's hold on one lock: Redis
// marks the hold with the owner's field; the Client counts its
// acquisitions (one per successful Lock not yet matched by an Unlock) and
// keeps the local deadline by which the lease must have been confirmed
// again. Fields other than op are guarded by the registry's mutex.
type hold struct {
	c        *Client
	kind     kind
	owner    string
	lease    time.Duration
	valid    time.Duration // how long after a renewal is sent the hold counts as valid: validity(lease)
	watchdog bool          // renewed by the watchdog, rather than a fixed lease (which it checks)
	acqs     []*acquisition
	token    int64     // the latest fencing token, 0 if none
	until    time.Time // the local deadline
	due      time.Time // the deadline the hold is queued at (expiry.go); not after until
	slot     int       // the hold's index in the deadline queue; -1 when not queued
	// op is held while a re-entry's attempt is in flight and while an
	// Unlock decides whether it releases the last acquisition, so that a
	// re-entry is never counted on a hold whose release is on its way.
	op chan struct{}
}

func (hd *hold) holdKey() holdKey { return holdKey{hd.kind.key(), hd.kind.field(hd.owner)} }

// lockOp takes hd.op, unless ctx ends first.
func (hd *hold) lockOp(ctx context.Context) error {
	select {
	case hd.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

func (hd *hold) unlockOp() { <-hd.op }

// acquisition is one successful Lock: its lock context and fencing token.
// unlocked is guarded by the registry's mutex.
type acquisition struct {
	hold     *hold
	cancel   context.CancelCauseFunc
	token    int64
	unlocked bool // Unlock was called with it
}

// Context keys. A lock context carries the owner (per Client, so that
// nested locks of one call chain share it, like a thread id in Java) and
// its acquisition (per lock, for Unlock and Token).
type (
	ownerKey struct{ c *Client }
	acqKey   struct {
		c         *Client
		key, role string
	}
	tokenKey struct{}
	fenceKey struct{} // FenceOf: the token with its owner
)

func ownerFrom(ctx context.Context, c *Client) (string, bool) {
	o, ok := ctx.Value(ownerKey{c}).(string)
	return o, ok
}

// Token returns the fencing token of the innermost fenced lock whose lock
// context ctx is or descends from. ok is false when there is none (the lock
// was taken without WithFencing).
func Token(ctx context.Context) (token int64, ok bool) {
	token, ok = ctx.Value(tokenKey{}).(int64)
	return token, ok
}

// register records a successful acquisition by req.owner, sent at start,
// and returns its lock context. The lease is counted from start, before
// the command was sent, so the local deadline is never later than Redis's.
// It fails only when the Client was closed meanwhile. A kind that keeps
// its acquisitions itself (selfKept) records them instead.
func (h *handle) register(ctx context.Context, req request, token int64, start time.Time) (context.Context, error) {
	if k, ok := h.kind.(selfKept); ok {
		return k.keep(ctx, req, start)
	}
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	acq, err := h.c.holds.add(h, req, token, start, cancel)
	if err != nil {
		cancel(err)
		return nil, err
	}
	lockCtx := &lockContext{Context: cctx, c: h.c, owner: req.owner, acqKey: h.acqKey, acq: acq}
	if req.fence {
		lockCtx.token = token
	}
	return lockCtx, nil
}

// lockContext is a lock context: a context that ctx's end does not
// cancel, ended by its acquisition's cancel, carrying the owner (under
// ownerKey), the acquisition (under its handle's acqKey) and, when fenced,
// the token (under tokenKey), as three context.WithValue layers would, in
// one value.
type lockContext struct {
	context.Context
	c      *Client
	owner  string
	acqKey any
	acq    *acquisition
	token  any // int64, or nil when not fenced
}

func (l *lockContext) Value(key any) any {
	switch k := key.(type) {
	case acqKey:
		if key == l.acqKey {
			return l.acq
		}
	case tokenKey:
		if l.token != nil {
			return l.token
		}
	case fenceKey:
		if t, ok := l.token.(int64); ok {
			return Fence{Token: t, Holder: l.owner}
		}
	case ownerKey:
		if k.c == l.c {
			return l.owner
		}
	}
	return l.Context.Value(key)
}

// registry is the Client's record of its holds, and the lock that guards
// them: per owner's hold on a lock, the hold; per lock, one of this
// Client's holds on it (for busyHere); whether the Client was closed
// (add refuses then). Its mutex guards the maps and the fields of each
// hold and acquisition that say so; under it the registry calls out only
// to the lease keeper (Add, Remove), so that a hold is kept exactly while
// it is registered. The zero value is an empty registry.
type registry struct {
	mu      sync.Mutex
	holds   map[holdKey]*hold
	holders map[lockKey]*hold
	dl      deadlines // the holds' local deadlines (expiry.go)
	closed  bool
}

// add records an acquisition of h's lock by req.owner, sent at start,
// with its token and its lock context's cancel: in a new hold, which the
// lease keeper keeps from now on, or in the owner's hold (a re-entry,
// which set the lease again). It fails with ErrClosed once close was
// called.
func (r *registry) add(h *handle, req request, token int64, start time.Time, cancel context.CancelCauseFunc) (*acquisition, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	k := h.holdKey(req.owner)
	hd := r.holds[k]
	if hd == nil {
		hd = newHold(h, req, start)
		if r.holds == nil {
			r.holds, r.holders = map[holdKey]*hold{}, map[lockKey]*hold{}
		}
		r.holds[k] = hd
		r.holders[h.queueKey()] = hd
		r.queue(hd)          // lost when its local deadline passes
		h.c.watchdog.Add(hd) // renews a watched hold, checks a fixed lease
	} else {
		hd.extend(start) // a re-entry set the lease again
	}
	hd.token = max(hd.token, token)
	acq := &acquisition{hold: hd, cancel: cancel, token: token}
	hd.acqs = append(hd.acqs, acq)
	return acq, nil
}

// newHold returns req.owner's hold on h's lock, taken by a request sent at
// start, with its local deadline, not yet queued.
func newHold(h *handle, req request, start time.Time) *hold {
	hd := &hold{c: h.c, kind: h.kind, owner: req.owner, lease: req.lease, valid: validity(req.lease),
		watchdog: !h.cfg.hasLease, op: make(chan struct{}, 1), slot: -1}
	hd.until = start.Add(hd.valid)
	return hd
}

// extend moves the hold's local deadline after a request sent at start set
// its lease again; the deadline queue finds it moved when the hold comes
// up. The registry's mutex must be held.
func (hd *hold) extend(start time.Time) {
	if until := start.Add(hd.valid); until.After(hd.until) {
		hd.until = until
	}
}

// held returns the hold k, if the Client has it.
func (r *registry) held(k holdKey) *hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holds[k]
}

// count is the hold count to report for the owner's hold k when Redis
// counts n: the Client's count of its acquisitions, if it has the hold.
func (r *registry) count(k holdKey, n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hd := r.holds[k]; hd != nil && len(hd.acqs) > 0 {
		return len(hd.acqs)
	}
	return n
}

// heldByOther reports whether another owner than owner holds lock qk
// through this Client, how long that hold's lease has left, and whether
// its kind's release is silent: publishes nothing (a SpinLock's).
func (r *registry) heldByOther(qk lockKey, owner string) (left time.Duration, silent, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hd := r.holders[qk]; hd != nil && hd.owner != owner {
		return time.Until(hd.until), hd.kind.channel(hd.owner) == "", true
	}
	return 0, false, false
}

// registered reports whether hd is still the Client's record of its hold.
func (r *registry) registered(hd *hold) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current(hd)
}

// current is registered with r.mu held.
func (r *registry) current(hd *hold) bool { return r.holds[hd.holdKey()] == hd }

// latest returns hd's latest fencing token, for a re-entry; ok is false
// when hd was released or lost.
func (r *registry) latest(hd *hold) (token int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return hd.token, r.current(hd)
}

// holding reports whether acq still stands for a hold: not unlocked, and
// its hold not released or lost.
func (r *registry) holding(acq *acquisition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !acq.unlocked && r.current(acq.hold)
}

// reentered reports whether acq is a re-entry: not its hold's first
// acquisition still counted.
func (r *registry) reentered(acq *acquisition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(acq.hold.acqs) > 0 && acq.hold.acqs[0] != acq
}

// deadline returns hd's local deadline.
func (r *registry) deadline(hd *hold) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return hd.until
}

// dropAcquisition takes acq out of its hold for Unlock, with hd.op held.
// When it was the hold's last acquisition (last), the hold leaves the
// registry, the lease keeper and its timer before its release is sent
// (which is what keeps renewal from outliving the lock, Redisson #7272).
// The error is errReleased or errLost when there is nothing to release.
// The busy mark under which the release runs is the caller's
// (handle.dropAcquisition).
func (r *registry) dropAcquisition(acq *acquisition) (last bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hd := acq.hold
	if acq.unlocked {
		return false, errReleased
	}
	acq.unlocked = true
	if !r.current(hd) {
		return false, errLost
	}
	hd.acqs = slices.DeleteFunc(hd.acqs, func(a *acquisition) bool { return a == acq })
	if len(hd.acqs) > 0 {
		return false, nil
	}
	r.drop(hd)
	return true, nil
}

// Why dropAcquisition refuses.
var (
	errReleased = errors.New("this hold was already released")
	errLost     = errors.New("the lock was lost")
)

// lose ends a hold whose lock is gone and tells its holder: every lock
// context of the hold is cancelled with cause err. A hold that was already
// released or replaced is left alone.
func (hd *hold) lose(err error) {
	acqs, ok := hd.c.holds.dropHold(hd)
	if !ok {
		return
	}
	hd.c.ended(hd, acqs, err)
}

// ended tells the holder of hd, which left the registry with acqs, that
// the lock is lost with cause err: a log line, Lost, and every lock
// context cancelled.
func (c *Client) ended(hd *hold, acqs []*acquisition, err error) {
	c.cfg.logger.Warn("dlock: lock lost", "lock", hd.kind.key(), "owner", hd.owner, "error", err)
	c.observeLost(hd, acqs, err)
	for _, a := range acqs {
		a.cancel(err)
	}
}

// dropHold drops hd, unless it was released or replaced already (ok false),
// and returns its acquisitions, for lose.
func (r *registry) dropHold(hd *hold) (acqs []*acquisition, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.current(hd) {
		return nil, false
	}
	r.drop(hd)
	acqs, hd.acqs = hd.acqs, nil
	return acqs, true
}

// drop removes a hold from the registry, the lease keeper and the
// deadline queue. r.mu must be held.
func (r *registry) drop(hd *hold) {
	delete(r.holds, hd.holdKey())
	if qk := (lockKey{hd.kind.key(), hd.kind.role()}); r.holders[qk] == hd {
		delete(r.holders, qk)
	}
	r.unqueue(hd)
	hd.c.watchdog.Remove(hd)
}

// renewed moves a hold's local deadline after a renewal sent at start.
func (r *registry) renewed(hd *hold, start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current(hd) {
		hd.extend(start)
	}
}

// extended sets a hold's local deadline to valid after start, when Extend
// set its lease at start.
func (r *registry) extended(hd *hold, start time.Time, valid time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current(hd) {
		hd.until = start.Add(valid)
		r.moved(hd)
	}
}

// close refuses every later add and returns the holds registered until
// now, which leave the registry: Close ends them.
func (r *registry) close() map[holdKey]*hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	holds := r.holds
	r.holds, r.holders = nil, nil
	for _, hd := range r.dl.heap {
		hd.slot = -1
	}
	r.dl.heap = nil
	r.arm() // stops the timer
	return holds
}
