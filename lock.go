package dlock

import (
	"context"
	"fmt"
	"time"
)

// handle is the part every lock kind shares: its public methods and the
// engine behind them. Lock kinds embed it and supply a kind.
type handle struct {
	c    *Client
	name string
	kind kind
	cfg  lockConfig
	// acqKey is the context key of the handle's acquisitions,
	// acqKey{c, kind.key(), kind.role()}, made into an interface once.
	acqKey any
}

// newHandle validates a lock's name and options and makes its handle with
// the kind that newKind returns for them.
func (c *Client) newHandle(name string, opts []LockOption, newKind func(name string, cfg lockConfig) (kind, error)) (handle, error) {
	if c == nil {
		return handle{}, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	if c.isClosed() {
		return handle{}, ErrClosed
	}
	if err := validateName(name); err != nil {
		return handle{}, err
	}
	var cfg lockConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return handle{}, err
	}
	k, err := newKind(name, cfg)
	if err != nil {
		return handle{}, err
	}
	return handle{c: c, name: name, kind: k, cfg: cfg, acqKey: acqKey{c, k.key(), k.role()}}, nil
}

// check rejects calls that cannot work: a handle not made by a Client's
// New* function, a nil context, a closed Client.
func (h *handle) check(ctx context.Context) error {
	switch {
	case h == nil || h.c == nil || h.kind == nil:
		return fmt.Errorf("%w: lock handle not made by a Client (use NewMutex and the like)", ErrInvalidOption)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	case h.c.isClosed():
		return ErrClosed
	}
	return nil
}

// lease is the lease each acquisition sets.
func (h *handle) lease() time.Duration { return h.c.lease(h.cfg) }

// lease is the lease of acquisitions configured by cfg: the fixed lease,
// or the watchdog timeout.
func (c *Client) lease(cfg lockConfig) time.Duration {
	if cfg.hasLease {
		return cfg.lease
	}
	return c.cfg.watchdogTimeout
}

// Name returns the lock's name.
func (h *handle) Name() string { return h.name }

// Lock takes the lock, waiting as long as ctx allows; a ctx deadline is the
// longest wait (Redisson's waitTime). It returns the lock context: pass it
// to Unlock, and down the call chain, where a Lock with it (or a context
// derived from it) re-enters instead of waiting. A lock context is not
// cancelled by ctx: it ends with its Unlock, and it is cancelled with cause
// ErrLockLost if the lock is lost first. When ctx ends first the error
// wraps ErrNotObtained and ctx.Err().
func (h *handle) Lock(ctx context.Context) (context.Context, error) {
	if h != nil && h.c != nil && h.c.waits != nil && ctx != nil {
		return h.c.waits.lock(ctx, h) // WithDeadlockDetection (deadlock.go)
	}
	w, err := h.waiter(ctx, false)
	if err != nil {
		return nil, err
	}
	return w.result(acquire(ctx, w, false))
}

// lock is Lock without deadlock detection, for deadlock.go: the acquire
// loop (acquire.go) run by the Lock's waiter (wait.go). Lock has the same
// lines inline, one frame fewer on its path (TestCallPath).
func (h *handle) lock(ctx context.Context) (context.Context, error) {
	w, err := h.waiter(ctx, false)
	if err != nil {
		return nil, err
	}
	return w.result(acquire(ctx, w, false))
}

// TryLock makes one attempt to take the lock. When another owner holds it
// the error wraps ErrNotObtained. Otherwise it is like Lock.
func (h *handle) TryLock(ctx context.Context) (context.Context, error) {
	w, err := h.waiter(ctx, true)
	if err != nil {
		return nil, err
	}
	return w.result(acquire(ctx, w, true))
}

// ForceUnlock deletes the lock whoever holds it and wakes its waiters. It
// reports whether there was a lock to delete. Holders find out at their
// next renewal or Unlock.
func (h *handle) ForceUnlock(ctx context.Context) (bool, error) {
	if err := h.check(ctx); err != nil {
		return false, err
	}
	ok, err := h.kind.forceRelease(ctx)
	if err != nil {
		return false, fmt.Errorf("dlock: force unlock %q: %w", h.name, err)
	}
	return ok, nil
}

// IsLocked reports whether anyone holds the lock.
func (h *handle) IsLocked(ctx context.Context) (bool, error) {
	if err := h.check(ctx); err != nil {
		return false, err
	}
	n, err := h.c.drv.Exists(ctx, h.kind.key()).Result()
	if err != nil {
		return false, fmt.Errorf("dlock: is locked %q: %w", h.name, err)
	}
	return n == 1, nil
}

// HoldCount returns how many holds the owner in ctx has on the lock: the
// number of its Lock calls not yet matched by an Unlock, or 0 when ctx
// carries no owner or Redis says the owner does not hold the lock. (Redis
// stores 1 for a dlock owner however often it re-entered: the Client
// counts re-entries.)
func (h *handle) HoldCount(ctx context.Context) (int, error) {
	if err := h.check(ctx); err != nil {
		return 0, err
	}
	owner, ok := ownerFrom(ctx, h.c)
	if !ok {
		return 0, nil
	}
	n, err := h.c.drv.HGet(ctx, h.kind.key(), h.kind.field(owner)).Int()
	switch {
	case isNil(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("dlock: hold count %q: %w", h.name, err)
	}
	return h.c.holds.count(h.holdKey(owner), n), nil
}

// TTL returns how long the lock's current lease has left, or 0 when nobody
// holds it.
func (h *handle) TTL(ctx context.Context) (time.Duration, error) {
	if err := h.check(ctx); err != nil {
		return 0, err
	}
	d, err := h.c.drv.PTTL(ctx, h.kind.key()).Result()
	if err != nil {
		return 0, fmt.Errorf("dlock: ttl %q: %w", h.name, err)
	}
	return max(d, 0), nil
}

// Extend sets the lease of the hold that ctx stands for (a lock context
// from Lock or TryLock, or a context derived from one) to lease from now,
// if the owner still holds the lock: redsync's Extend, redislock's Refresh.
// It is for holds with a fixed lease (WithLease); the watchdog renews the
// others, and Extend refuses them with ErrInvalidOption. The lock context's
// deadline for ErrLockLost moves with the lease. The error wraps ErrNotHeld
// when the lock was lost (the lock context is then cancelled with
// ErrLockLost).
func (h *handle) Extend(ctx context.Context, lease time.Duration) error {
	if err := h.check(ctx); err != nil {
		return err
	}
	if lease < time.Millisecond || lease > MaxLease {
		return fmt.Errorf("%w: lease %v is outside [1ms, %v]", ErrInvalidOption, lease, MaxLease)
	}
	acq, ok := ctx.Value(h.acqKey).(*acquisition)
	if !ok {
		return fmt.Errorf("%w: %q: the context carries no hold of this lock", ErrNotHeld, h.name)
	}
	hd := acq.hold
	if hd.watchdog {
		return fmt.Errorf("%w: %q: the watchdog renews this hold; Extend is for holds with a fixed lease", ErrInvalidOption, h.name)
	}
	if !h.c.holds.holding(acq) {
		return fmt.Errorf("%w: %q: the hold was released or lost", ErrNotHeld, h.name)
	}
	start := time.Now()
	alive, err := hd.kind.renewer().renew(ctx, h.c, lease, []*hold{hd})
	switch {
	case err != nil:
		return fmt.Errorf("dlock: extend %q: %w", h.name, err)
	case !alive[0]:
		hd.lose(fmt.Errorf("%w: %q: gone when extended", ErrLockLost, h.name))
		return fmt.Errorf("%w: %q: Redis no longer had it", ErrNotHeld, h.name)
	}
	h.c.holds.extended(hd, start, validity(lease))
	return nil
}
