package dlock

// The spin lock exists for deployments where pub/sub is the bottleneck or
// is not there: a Redis Cluster with a great many locks (every waiter's
// subscription costs the shard, and classic pub/sub broadcasts each
// unlock to every node), proxies that do not pass SUBSCRIBE. Its holds are
// a Mutex's (Redisson's RLock hash), and its waiters poll with an
// exponential backoff instead of waiting for an unlock message, as
// Redisson's RSpinLock does. It is a kind of its own on the shared engine:
// it contributes its scripts and declares its backoff (spinner); the
// acquire loop and the waiter do the rest, as for every kind.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
)

// SpinLock is a reentrant distributed lock without pub/sub: Redisson
// RSpinLock's semantics and data layout. The lock is the Mutex's hash (a
// Go SpinLock, a Go Mutex, a Java RLock and a Java RSpinLock on one name
// exclude each other), but nothing is published or subscribed: a waiting
// Lock tries again after a backoff that starts at 1 ms and doubles, with
// jitter, up to 128 ms (Redisson's default ExponentialBackOff; see
// WithBackoff), and never sleeps past the holder's lease. Unlock frees the
// lock without a message, as Redisson's spin lock does, so waiters of
// other kinds on the same name are not woken by it: Go Mutex and
// FairMutex waiters of other Clients, and Java RLock waiters, find the
// lock free only at the end of their sleep (the lease). A Mutex waiter of
// the same Client is the exception: the Unlock wakes it to try again.
//
// Use it where subscriptions are the problem: very many locks or waiters
// on a Redis Cluster, or a proxy that does not pass pub/sub. Waiters cost
// Redis one script per backoff step instead of one subscription, and a
// waiter takes the lock up to one backoff step (at most 128 ms by
// default) after it is freed, where a Mutex waiter is woken at once.
//
// Ownership in lock contexts, reentrancy, leases, the watchdog and fencing
// are as for the Mutex. A SpinLock is safe for concurrent use.
type SpinLock struct {
	handle
}

var _ Locker = (*SpinLock)(nil)

// Redisson's default spin backoff (LockOptions.ExponentialBackOff).
const (
	DefaultSpinInitial = time.Millisecond
	DefaultSpinMax     = 128 * time.Millisecond
)

// NewSpinLock returns a handle on the spin lock called name. It talks to
// Redis only when used. Options: WithLease, WithFencing, WithBackoff.
func (c *Client) NewSpinLock(name string, opts ...LockOption) (*SpinLock, error) {
	h, err := c.newHandle(name, opts, func(name string, cfg lockConfig) (kind, error) {
		if err := cfg.accept("SpinLock", optBackoff); err != nil {
			return nil, err
		}
		initial, most := cfg.spinInitial, cfg.spinMax
		if initial == 0 {
			initial, most = DefaultSpinInitial, DefaultSpinMax
		}
		return &spinKind{c: c, name: name, token: layout.Prefixed(layout.TokenPrefix, name), initial: initial, most: most}, nil
	})
	if err != nil {
		return nil, err
	}
	return &SpinLock{h}, nil
}

// WithBackoff sets how a SpinLock's waiters back off between attempts:
// the first sleep is initial, and each next one doubles the previous and
// adds a jitter of less than as many milliseconds as attempts have failed, up
// to most (Redisson's ExponentialBackOff with multiplier 2). initial ==
// most is a constant backoff (Redisson's ConstantBackOff). initial must be
// at least 1 ms, most at least initial and at most a minute. The default
// is DefaultSpinInitial (1 ms) to DefaultSpinMax (128 ms). Other lock
// kinds refuse it (ErrInvalidOption).
func WithBackoff(initial, most time.Duration) LockOption {
	return func(c *lockConfig) { c.spinInitial, c.spinMax, c.specific = initial, most, c.specific|optBackoff }
}

// validateBackoff checks WithBackoff's values, if given.
func (c lockConfig) validateBackoff() error {
	if c.specific&optBackoff == 0 {
		return nil
	}
	if c.spinInitial < time.Millisecond || c.spinMax < c.spinInitial || c.spinMax > time.Minute {
		return fmt.Errorf("%w: backoff from %v to %v: want 1ms <= initial <= most <= 1m", ErrInvalidOption, c.spinInitial, c.spinMax)
	}
	return nil
}

// spinner is implemented by kinds whose waiters poll with a backoff
// instead of waiting for a message: the waiter asks for a fresh backoff
// once per Lock, and each sleep lasts its next step, or the holder's ttl
// if that is shorter.
type spinner interface {
	newBackoff() *backoff
}

// backoff is one waiter's exponential backoff (Redisson's
// ExponentialBackOffPolicy): the first step is initial; each next one is
// the previous doubled plus a jitter of 0 to fails-1 milliseconds (Java's
// nextInt(++fails)), at most most.
type backoff struct {
	next, most time.Duration
	fails      int
}

// step returns the next sleep, and moves on.
func (b *backoff) step() time.Duration {
	d := b.next
	b.fails++
	b.next = min(2*b.next+time.Duration(rand.IntN(b.fails))*time.Millisecond, b.most)
	return d
}

// spinKind holds the Redis names of one spin lock and its backoff.
type spinKind struct {
	c             *Client
	name, token   string
	initial, most time.Duration
}

func (k *spinKind) key() string               { return k.name }
func (k *spinKind) lockName() string          { return k.name }
func (k *spinKind) field(owner string) string { return owner }
func (k *spinKind) role() string              { return "" }
func (k *spinKind) renewer() renewer          { return hashRenewer{} }
func (k *spinKind) label() string             { return KindSpin }
func (k *spinKind) channel(string) string     { return "" } // no messages: waiters back off
func (k *spinKind) newBackoff() *backoff      { return &backoff{next: k.initial, most: k.most} }

func (k *spinKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	return attemptReply(k.c.drv.Run(ctx, r.check, scripts.LockAcquire, []string{k.name, k.token}, millis(r.lease), r.owner, fenceArg(r)))
}

func (k *spinKind) release(ctx context.Context, r request) (releaseResult, error) {
	return releaseReply(k.c.drv.Run(ctx, nil, scripts.SpinRelease, []string{k.name}, r.owner))
}

func (k *spinKind) forceRelease(ctx context.Context) (bool, error) {
	return k.c.forceScript(ctx, scripts.SpinForceRelease, []string{k.name, layout.UnlockLatch(k.name, k.c.newRequest())})
}
