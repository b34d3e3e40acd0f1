package dlock

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// holdKey names one owner's holds on one lock.
type holdKey struct {
	key, field string
}

// hold is what the Client knows of one owner's holds on one lock: one
// acquisition per successful Lock not yet matched by an Unlock, and the
// local deadline by which the lease must have been confirmed again. All
// fields are guarded by the Client's mutex.
type hold struct {
	c        *Client
	kind     kind
	owner    string
	lease    time.Duration
	valid    time.Duration // how long after a renewal is sent the hold counts as valid: validity(kind, lease)
	watchdog bool          // renewed by the watchdog, rather than a fixed lease
	acqs     []*acquisition
	expiry   *time.Timer // fires when the lease has run out on the local clock
}

// acquisition is one successful Lock: its lock context and fencing token,
// and, once Unlock has been called with it, the request id of its release.
// An Unlock that failed and is called again sends the same request, so the
// release's latch keeps it from counting down twice. Its mutable fields are
// guarded by the Client's mutex.
type acquisition struct {
	hold     *hold
	cancel   context.CancelCauseFunc
	token    int64
	release  string // request id of the release, once Unlock was called
	unlocked bool   // a release succeeded
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

// register records a successful acquisition that started at start and
// returns its lock context. The lease is counted from start, before the
// command was sent, so the local deadline is never later than Redis's. It
// fails only when the Client was closed meanwhile.
func (c *Client) register(ctx context.Context, h *handle, owner string, token int64, start time.Time) (context.Context, error) {
	lockCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	lockCtx = context.WithValue(lockCtx, ownerKey{c}, owner)
	if h.cfg.fenced {
		lockCtx = context.WithValue(lockCtx, tokenKey{}, token)
	}
	lease := h.lease()

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	k := holdKey{h.kind.key(), h.kind.field(owner)}
	hd := c.holds[k]
	if hd == nil {
		hd = &hold{c: c, kind: h.kind, owner: owner, lease: lease, valid: validity(h.kind, lease), watchdog: !h.cfg.hasLease}
		hd.expiry = time.AfterFunc(time.Until(start.Add(hd.valid)), func() {
			c.lose(hd, fmt.Errorf("%w: %q: lease of %v ran out before it was renewed", ErrLockLost, h.name, lease))
		})
		c.holds[k] = hd
		if hd.watchdog {
			c.watchdog.Add(hd)
		}
	} else {
		// A reentrant acquisition set the lease again.
		hd.expiry.Reset(time.Until(start.Add(hd.valid)))
	}
	acq := &acquisition{hold: hd, cancel: cancel, token: token}
	hd.acqs = append(hd.acqs, acq)
	return context.WithValue(lockCtx, acqKey{c, h.kind.key(), h.kind.role()}, acq), nil
}

// heldWith returns the hold owner already has on h's lock, if any.
func (c *Client) heldWith(h *handle, owner string) *hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[holdKey{h.kind.key(), h.kind.field(owner)}]
}

// releasing returns the request id with which to release acq: a new one
// the first time, the same one when an Unlock is tried again. It fails when
// acq was already released.
func (c *Client) releasing(acq *acquisition) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if acq.unlocked {
		return "", ErrNotHeld
	}
	if acq.release == "" {
		acq.release = c.newRequest()
	}
	return acq.release, nil
}

// released records the successful release of acq: its lock context ends,
// and with the hold's last acquisition the hold goes, watchdog and timer
// included, before Unlock returns. That order is what keeps renewal from
// outliving the lock (Redisson #7272).
func (c *Client) released(acq *acquisition) {
	c.mu.Lock()
	acq.unlocked = true
	hd := acq.hold
	if i := slices.Index(hd.acqs, acq); i >= 0 {
		hd.acqs = slices.Delete(hd.acqs, i, i+1)
		if len(hd.acqs) == 0 && c.holds[holdKey{hd.kind.key(), hd.kind.field(hd.owner)}] == hd {
			c.drop(hd)
		}
	}
	c.mu.Unlock()
	acq.cancel(ErrUnlocked)
}

// lose ends a hold whose lock is gone and tells its holder: every lock
// context of the hold is cancelled with cause err. A hold that was already
// released or replaced is left alone.
func (c *Client) lose(hd *hold, err error) {
	c.mu.Lock()
	if c.holds[holdKey{hd.kind.key(), hd.kind.field(hd.owner)}] != hd {
		c.mu.Unlock()
		return
	}
	c.drop(hd)
	c.mu.Unlock()
	c.cfg.logger.Warn("dlock: lock lost", "lock", hd.kind.key(), "owner", hd.owner, "error", err)
	hd.end(err)
}

// drop removes a hold from the registry, the watchdog and its timer.
// c.mu must be held.
func (c *Client) drop(hd *hold) {
	delete(c.holds, holdKey{hd.kind.key(), hd.kind.field(hd.owner)})
	hd.expiry.Stop()
	if hd.watchdog {
		c.watchdog.Remove(hd)
	}
}

// end cancels every lock context the hold still has.
func (hd *hold) end(cause error) {
	hd.c.mu.Lock()
	acqs := hd.acqs
	hd.acqs = nil
	hd.c.mu.Unlock()
	hd.expiry.Stop()
	for _, a := range acqs {
		a.cancel(cause)
	}
}

// renewed moves a hold's local deadline after a renewal sent at start.
func (c *Client) renewed(hd *hold, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[holdKey{hd.kind.key(), hd.kind.field(hd.owner)}] == hd {
		hd.expiry.Reset(time.Until(start.Add(hd.valid)))
	}
}
