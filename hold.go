package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

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
// again. Fields other than op are guarded by the Client's mutex.
type hold struct {
	c        *Client
	kind     kind
	owner    string
	lease    time.Duration
	valid    time.Duration // how long after a renewal is sent the hold counts as valid: validity(kind, lease)
	watchdog bool          // renewed by the watchdog, rather than a fixed lease (which it checks)
	acqs     []*acquisition
	token    int64       // the latest fencing token, 0 if none
	until    time.Time   // the local deadline
	expiry   *time.Timer // fires at until
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
// unlocked is guarded by the Client's mutex.
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
// It fails only when the Client was closed meanwhile.
func (c *Client) register(ctx context.Context, h *handle, req request, token int64, start time.Time) (context.Context, error) {
	cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	lockCtx := &lockContext{Context: cctx, c: c, owner: req.owner, acqKey: h.acqKey}
	if req.fence {
		lockCtx.token = token
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	k := holdKey{h.kind.key(), h.kind.field(req.owner)}
	hd := c.holds[k]
	if hd == nil {
		hd = &hold{c: c, kind: h.kind, owner: req.owner, lease: req.lease, valid: validity(h.kind, req.lease),
			watchdog: !h.cfg.hasLease, op: make(chan struct{}, 1)}
		hd.until = start.Add(hd.valid)
		hd.expiry = time.AfterFunc(time.Until(hd.until), func() {
			c.lose(hd, fmt.Errorf("%w: %q: lease of %v ran out before it was renewed", ErrLockLost, h.name, hd.lease))
		})
		c.holds[k] = hd
		c.holders[h.queueKey()] = hd
		c.watchdog.Add(hd) // renews a watched hold, checks a fixed lease
	} else {
		hd.extend(start) // a re-entry set the lease again
	}
	hd.token = max(hd.token, token)
	acq := &acquisition{hold: hd, cancel: cancel, token: token}
	hd.acqs = append(hd.acqs, acq)
	lockCtx.acq = acq
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
	case ownerKey:
		if k.c == l.c {
			return l.owner
		}
	}
	return l.Context.Value(key)
}

// extend moves the hold's local deadline after a request sent at start set
// its lease again. c.mu must be held.
func (hd *hold) extend(start time.Time) {
	if until := start.Add(hd.valid); until.After(hd.until) {
		hd.until = until
		hd.expiry.Reset(time.Until(until))
	}
}

// held returns the hold owner has on h's lock, if any.
func (c *Client) held(h *handle, owner string) *hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[holdKey{h.kind.key(), h.kind.field(owner)}]
}

// holdCount is the hold count to report for the owner's hold k when Redis
// counts n: the Client's count of its acquisitions, if it has the hold.
func (c *Client) holdCount(k holdKey, n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hd := c.holds[k]; hd != nil && len(hd.acqs) > 0 {
		return len(hd.acqs)
	}
	return n
}

// registered reports whether hd is still the Client's record of its hold.
// c.mu must be held.
func (c *Client) registered(hd *hold) bool { return c.holds[hd.holdKey()] == hd }

// dropAcquisition takes acq out of its hold for Unlock, with hd.op held. When it
// was the hold's last acquisition, the hold leaves the registry, the
// watchdog and its timer before its release is sent (which is what keeps
// renewal from outliving the lock, Redisson #7272), and dropAcquisition returns the
// busy mark under which the release must run (spawn), so that a new
// acquisition by the owner waits for it. The error is
// errReleased or errLost when there is nothing to release.
func (c *Client) dropAcquisition(acq *acquisition) (release *busy, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hd := acq.hold
	if acq.unlocked {
		return nil, errReleased
	}
	acq.unlocked = true
	if !c.registered(hd) {
		return nil, errLost
	}
	hd.acqs = slices.DeleteFunc(hd.acqs, func(a *acquisition) bool { return a == acq })
	if len(hd.acqs) > 0 {
		return nil, nil
	}
	c.drop(hd)
	return c.addBusy(hd.holdKey()), nil
}

// Why dropAcquisition refuses.
var (
	errReleased = errors.New("this hold was already released")
	errLost     = errors.New("the lock was lost")
)

// lose ends a hold whose lock is gone and tells its holder: every lock
// context of the hold is cancelled with cause err. A hold that was already
// released or replaced is left alone.
func (c *Client) lose(hd *hold, err error) {
	c.mu.Lock()
	if !c.registered(hd) {
		c.mu.Unlock()
		return
	}
	c.drop(hd)
	acqs := hd.acqs
	hd.acqs = nil
	c.mu.Unlock()
	c.cfg.logger.Warn("dlock: lock lost", "lock", hd.kind.key(), "owner", hd.owner, "error", err)
	c.observeLost(hd, acqs, err)
	for _, a := range acqs {
		a.cancel(err)
	}
}

// drop removes a hold from the registry, the watchdog and its timer.
// c.mu must be held.
func (c *Client) drop(hd *hold) {
	delete(c.holds, hd.holdKey())
	if qk := (lockKey{hd.kind.key(), hd.kind.role()}); c.holders[qk] == hd {
		delete(c.holders, qk)
	}
	hd.expiry.Stop()
	c.watchdog.Remove(hd)
}

// renewed moves a hold's local deadline after a renewal sent at start.
func (c *Client) renewed(hd *hold, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.registered(hd) {
		hd.extend(start)
	}
}

// extended sets a hold's local deadline to valid after start, when Extend
// set its lease at start.
func (c *Client) extended(hd *hold, start time.Time, valid time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.registered(hd) {
		hd.until = start.Add(valid)
		hd.expiry.Reset(time.Until(hd.until))
	}
}
