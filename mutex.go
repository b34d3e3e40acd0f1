package dlock

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
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
// Redis only when used. Options: WithLease, WithFencing, WithoutReentry.
func (c *Client) NewMutex(name string, opts ...LockOption) (*Mutex, error) {
	h, err := c.newHandle(name, opts, func(name string, cfg lockConfig) (kind, error) {
		return newMutexKind(c, name), cfg.accept("Mutex", optNoReentry)
	})
	if err != nil {
		return nil, err
	}
	return &Mutex{h}, nil
}

// mutexKind holds the Redis names of one reentrant lock, and the key lists
// of its scripts, slices of one array (made once; a script call only
// reads them). A Client may hold a million locks, each with its handle:
// the names share one string, the key lists one array.
type mutexKind struct {
	c *Client
	// keys is the lock, the token counter, the lock, the channel, the
	// token counter: the acquire script's keys (0:2), the handoff's (2:5),
	// the release's (2:4).
	keys [5]string
}

func newMutexKind(c *Client, name string) *mutexKind {
	channel, token := layout.PrefixedPair(layout.LockChannelPrefix, layout.TokenPrefix, name)
	return &mutexKind{c: c, keys: [5]string{name, token, name, channel, token}}
}

func (k *mutexKind) acquireKeys() []string { return k.keys[0:2:2] }
func (k *mutexKind) handKeys() []string    { return k.keys[2:5:5] }
func (k *mutexKind) releaseKeys() []string { return k.keys[2:4:4] }
func (k *mutexKind) token() string         { return k.keys[1] }

func (k *mutexKind) key() string               { return k.keys[0] }
func (k *mutexKind) lockName() string          { return k.keys[0] }
func (k *mutexKind) field(owner string) string { return owner }
func (k *mutexKind) role() string              { return "" }
func (k *mutexKind) renewer() renewer          { return hashRenewer{} }
func (k *mutexKind) label() string             { return KindMutex }
func (k *mutexKind) channel(string) string     { return k.keys[3] }

// oneRun: a Mutex's attempt is one Run of lock_acquire.lua.
func (k *mutexKind) oneRun() {}

func (k *mutexKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	return attemptReply(k.c.drv.Run(ctx, r.check, scripts.LockAcquire, k.acquireKeys(), millis(r.lease), r.owner, fenceArg(r)))
}

func (k *mutexKind) release(ctx context.Context, r request) (releaseResult, error) {
	return releaseReply(k.c.drv.Run(ctx, nil, scripts.LockRelease, k.releaseKeys(), unlockMessage, r.owner, k.c.publish))
}

func (k *mutexKind) releaseTo(ctx context.Context, r, next request, when string, ours int) (handoff, error) {
	cmd, resent := k.c.drv.Run(ctx, nil, scripts.LockReleaseTo, k.handKeys(),
		unlockMessage, r.owner, k.c.publish, next.owner, millis(next.lease), fenceArg(next), when, ours)
	res, err := cmd.Int64Slice()
	switch {
	case err != nil:
		return handoff{}, err
	case len(res) != 2:
		return handoff{}, errors.New("unexpected reply from the release script")
	case res[0] == -1 && !resent:
		return handoff{res: notHeld}, nil
	}
	return handoff{res: released, handed: res[0] == 2, freed: res[0] == 1, token: res[1]}, nil
}

func (k *mutexKind) forceRelease(ctx context.Context) (bool, error) {
	return k.c.forceScript(ctx, scripts.ForceRelease,
		[]string{k.key(), k.channel(""), layout.UnlockLatch(k.key(), k.c.newRequest())}, unlockMessage, k.c.publish)
}
