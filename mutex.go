package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// Mutex is a reentrant distributed lock with Redisson RLock's semantics and
// data layout: a hash named after the lock maps each owner
// ("<clientID>:<n>") to its hold count, and the release of the last hold
// publishes "0" on redisson_lock__channel:{name}. A Go Mutex and a Java
// RLock on the same name exclude each other.
//
// Ownership travels in the lock context Lock returns, not in the Mutex: two
// goroutines calling Lock on one shared Mutex with unrelated contexts
// exclude each other, while a Lock with the lock context (or one derived
// from it) re-enters. A Mutex is safe for concurrent use.
type Mutex struct {
	handle
}

// NewMutex returns a handle on the reentrant lock called name. It talks to
// Redis only when used. Options: WithLease, WithFencing.
func (c *Client) NewMutex(name string, opts ...LockOption) (*Mutex, error) {
	h, err := c.newHandle(name, opts, func(name string, _ lockConfig) (kind, error) { return newMutexKind(c, name), nil })
	if err != nil {
		return nil, err
	}
	return &Mutex{h}, nil
}

// mutexKind holds the Redis names of one reentrant lock.
type mutexKind struct {
	c           *Client
	name        string
	channelName string
	token       string
}

func newMutexKind(c *Client, name string) *mutexKind {
	return &mutexKind{c: c, name: name, channelName: prefixName(channelPrefix, name), token: prefixName(tokenPrefix, name)}
}

func (k *mutexKind) key() string               { return k.name }
func (k *mutexKind) field(owner string) string { return owner }
func (k *mutexKind) role() string              { return "" }
func (k *mutexKind) renewer() renewer          { return hashRenewer{} }
func (k *mutexKind) channel(string) string     { return k.channelName }

func (k *mutexKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	keys := []string{k.name, k.token, acquireLatch(k.name, r.id)}
	res, err := k.c.eval(ctx, scripts.LockAcquire, keys,
		millis(r.lease), r.owner, boolArg(r.fence), millis(k.c.cfg.latchTTL)).Int64Slice()
	if err != nil {
		return attemptResult{}, err
	}
	return parseAttempt(res)
}

func (k *mutexKind) release(ctx context.Context, r request) (releaseResult, error) {
	keys := []string{k.name, k.channelName, releaseLatch(k.name, r.id)}
	n, err := k.c.eval(ctx, scripts.LockRelease, keys,
		unlockMessage, millis(r.lease), r.owner, k.c.publish, millis(k.c.cfg.latchTTL)).Int64()
	if err != nil {
		return 0, err
	}
	return parseRelease(n), nil
}

func (k *mutexKind) abandon(context.Context, request) error { return nil }

// forceRelease deletes the lock under a fresh request latch: a command
// go-redis re-sends after a lost reply answers as the first run did, rather
// than deleting a lock another owner took in between.
func (k *mutexKind) forceRelease(ctx context.Context) (bool, error) {
	keys := []string{k.name, k.channelName, releaseLatch(k.name, k.c.newRequest())}
	n, err := k.c.eval(ctx, scripts.ForceRelease, keys, unlockMessage, k.c.publish, millis(k.c.cfg.latchTTL)).Int64()
	return n == 1, err
}

// Messages on a lock's channel, as in Redisson.
const (
	unlockMessage     = "0" // the lock is free: wake one waiter
	readUnlockMessage = "1" // a write lock is free: wake every reader
)

// parseAttempt reads the {acquired, token-or-pttl} reply of acquire scripts.
func parseAttempt(res []int64) (attemptResult, error) {
	if len(res) != 2 {
		return attemptResult{}, errors.New("unexpected reply from the acquire script")
	}
	if res[0] == 1 {
		return attemptResult{acquired: true, token: res[1]}, nil
	}
	ttl := time.Duration(res[1]) * time.Millisecond
	if res[1] == -2 {
		ttl = 0 // freed in between: try again at once
	}
	return attemptResult{ttl: ttl}, nil
}

// parseRelease reads the 1/0/-1 reply of release scripts.
func parseRelease(n int64) releaseResult {
	switch n {
	case 1:
		return released
	case 0:
		return stillHeld
	default:
		return notHeld
	}
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }
