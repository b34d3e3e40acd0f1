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
}

func (c *Client) newHandle(name string, opts []LockOption, k func(name string) kind) (handle, error) {
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
	return handle{c: c, name: name, kind: k(name), cfg: cfg}, nil
}

// lease is the lease each acquisition sets.
func (h *handle) lease() time.Duration {
	if h.cfg.hasLease {
		return h.cfg.lease
	}
	return h.c.cfg.watchdogTimeout
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
	return h.acquire(ctx, false)
}

// TryLock makes one attempt to take the lock. When another owner holds it
// the error wraps ErrNotObtained. Otherwise it is like Lock.
func (h *handle) TryLock(ctx context.Context) (context.Context, error) {
	return h.acquire(ctx, true)
}

// Unlock releases one hold of the owner in lockCtx, a context returned by
// Lock or TryLock (or derived from one); that context ends with cause
// ErrUnlocked. The lock is free when every hold is released. The error
// wraps ErrNotHeld when the owner does not hold the lock.
func (h *handle) Unlock(lockCtx context.Context) error {
	c := h.c
	if c.isClosed() {
		return ErrClosed
	}
	owner, ok := ownerFrom(lockCtx, c)
	if !ok {
		return fmt.Errorf("%w: %q: the context carries no owner; pass the context Lock returned", ErrNotHeld, h.name)
	}
	// The lock context may already be cancelled (lost lock); the release
	// still has to reach Redis.
	ctx := context.WithoutCancel(lockCtx)
	res, err := h.kind.release(ctx, request{owner: owner, id: c.newRequest(), lease: h.lease()})
	if err != nil {
		return fmt.Errorf("dlock: unlock %q: %w", h.name, err)
	}
	if res == notHeld {
		c.lost(h, owner)
		return fmt.Errorf("%w: %q", ErrNotHeld, h.name)
	}
	c.released(lockCtx, h, owner)
	return nil
}

// lost ends the local record of a hold Redis no longer has.
func (c *Client) lost(h *handle, owner string) {
	c.mu.Lock()
	hd := c.holds[holdKey{h.kind.key(), h.kind.field(owner)}]
	c.mu.Unlock()
	if hd != nil {
		c.lose(hd, fmt.Errorf("%w: %q: not held at unlock", ErrLockLost, h.name))
	}
}

// ForceUnlock deletes the lock whoever holds it and wakes its waiters. It
// reports whether there was a lock to delete. Holders find out at their
// next renewal or Unlock.
func (h *handle) ForceUnlock(ctx context.Context) (bool, error) {
	if h.c.isClosed() {
		return false, ErrClosed
	}
	ok, err := h.kind.forceRelease(ctx)
	if err != nil {
		return false, fmt.Errorf("dlock: force unlock %q: %w", h.name, err)
	}
	return ok, nil
}

// IsLocked reports whether anyone holds the lock.
func (h *handle) IsLocked(ctx context.Context) (bool, error) {
	if h.c.isClosed() {
		return false, ErrClosed
	}
	n, err := h.c.rdb.Exists(ctx, h.kind.key()).Result()
	if err != nil {
		return false, fmt.Errorf("dlock: is locked %q: %w", h.name, err)
	}
	return n == 1, nil
}

// HoldCount returns how many holds the owner in ctx has on the lock: 0 when
// ctx carries no owner or the owner does not hold it.
func (h *handle) HoldCount(ctx context.Context) (int, error) {
	if h.c.isClosed() {
		return 0, ErrClosed
	}
	owner, ok := ownerFrom(ctx, h.c)
	if !ok {
		return 0, nil
	}
	n, err := h.c.rdb.HGet(ctx, h.kind.key(), h.kind.field(owner)).Int()
	if err != nil && !isNil(err) {
		return 0, fmt.Errorf("dlock: hold count %q: %w", h.name, err)
	}
	return n, nil
}

// TTL returns how long the lock's current lease has left, or 0 when nobody
// holds it.
func (h *handle) TTL(ctx context.Context) (time.Duration, error) {
	if h.c.isClosed() {
		return 0, ErrClosed
	}
	d, err := h.c.rdb.PTTL(ctx, h.kind.key()).Result()
	if err != nil {
		return 0, fmt.Errorf("dlock: ttl %q: %w", h.name, err)
	}
	return max(d, 0), nil
}
