package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
)

// RWMutex is a distributed read-write lock with Redisson ReadWriteLock's
// semantics and data layout: many readers or one writer. Its two halves
// are lock handles of their own, ReadLock and WriteLock, with every method
// a Mutex has:
//
//	rw, _ := client.NewRWMutex("config")
//	readCtx, err := rw.ReadLock().Lock(ctx)  // shared with other readers
//	...
//	err = rw.ReadLock().Unlock(readCtx)
//
//	writeCtx, err := rw.WriteLock().Lock(ctx) // excludes readers and writers
//	...
//	err = rw.WriteLock().Unlock(writeCtx)
//
// Both halves are reentrant for the owner in the lock context, as for the
// Mutex. The writer may also take read locks with its lock context
// (downgrade): they outlive its write lock if it releases that first. The
// reverse, asking for the write lock with the lock context of a read lock,
// would wait for itself and fails at once with ErrUpgrade. (With an
// unrelated context it is another owner and waits like any writer.)
// Readers that arrive while readers hold the lock enter at once, even when
// a writer is waiting, as in Redisson: a steady stream of readers can keep
// a writer waiting.
//
// Layout: the hash named after the lock holds field mode ("read" or
// "write"), <owner> -> read holds and <owner>:write -> write holds; read
// hold k of an owner has its own key {name}:<owner>:rwlock_timeout:<k> with
// its lease, and the hash lives as long as the longest-living hold. The
// watchdog renews only this Client's read holds, so holds of a reader that
// died run out. Waiters of both halves share the channel
// redisson_rwlock:{name}: a write unlock wakes every waiter ("1"), the last
// read unlock one ("0"); ForceUnlock publishes "0" for the read half and
// "1" for the write half, as Redisson does. A write unlock that leaves the
// writer's own read holds publishes "1" too, where Redisson says nothing;
// a reader waiting on such a writer checks every 250 ms in case it is a
// Java one. A Go RWMutex and a Java RReadWriteLock on the same
// name exclude each other.
//
// An RWMutex is safe for concurrent use.
type RWMutex struct {
	read  *ReadLock
	write *WriteLock
}

// ReadLock is the read half of an RWMutex: held by many owners at once,
// never together with another owner's write lock. IsLocked and TTL report
// on the whole read-write lock; ForceUnlock deletes it only while it is
// held in read mode, as Redisson's does.
type ReadLock struct {
	handle
}

// WriteLock is the write half of an RWMutex: held by one owner at a time,
// and only when no other owner holds a read lock. IsLocked and TTL report
// on the whole read-write lock; ForceUnlock deletes it only while it is
// held in write mode, as Redisson's does.
type WriteLock struct {
	handle
}

var (
	_ Locker = (*ReadLock)(nil)
	_ Locker = (*WriteLock)(nil)
)

// NewRWMutex returns a handle on the read-write lock called name. It talks
// to Redis only when used. Options, for both halves: WithLease,
// WithFencing (the token counter is shared by reads and writes).
func (c *Client) NewRWMutex(name string, opts ...LockOption) (*RWMutex, error) {
	r, err := c.newHandle(name, opts, func(name string, cfg lockConfig) (kind, error) {
		return &readKind{newRWNames(c, name)}, cfg.accept("RWMutex", 0)
	})
	if err != nil {
		return nil, err
	}
	w, err := c.newHandle(name, opts, func(name string, _ lockConfig) (kind, error) { return &writeKind{newRWNames(c, name)}, nil })
	if err != nil {
		return nil, err
	}
	return &RWMutex{read: &ReadLock{r}, write: &WriteLock{w}}, nil
}

// ReadLock returns the read half of the lock.
func (rw *RWMutex) ReadLock() *ReadLock { return rw.read }

// WriteLock returns the write half of the lock.
func (rw *RWMutex) WriteLock() *WriteLock { return rw.write }

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.read.name }

// rwNames holds the Redis names both halves of a read-write lock share.
type rwNames struct {
	c           *Client
	name        string
	channelName string
	token       string
}

func newRWNames(c *Client, name string) rwNames {
	return rwNames{c: c, name: name, channelName: layout.Prefixed(layout.RWChannelPrefix, name), token: layout.Prefixed(layout.TokenPrefix, name)}
}

func (n rwNames) key() string           { return n.name }
func (n rwNames) lockName() string      { return n.name }
func (n rwNames) channel(string) string { return n.channelName }

// forceReleaseMode deletes the lock if it is held in mode, publishing
// Redisson's message for that mode: unlockMessage (wake one) after a read
// lock, whose only waiters are writers, readUnlockMessage (wake all) after
// a write lock.
func (n rwNames) forceReleaseMode(ctx context.Context, mode, message string) (bool, error) {
	keys := []string{n.name, n.channelName, layout.UnlockLatch(n.name, n.c.newRequest())}
	return n.c.forceScript(ctx, scripts.RWForceRelease, keys, mode, message, n.c.publish)
}

// downgradePoll bounds a reader's sleep while the writer holding the lock
// also holds read locks: when that writer is a Redisson client, its write
// unlock leaves the lock to readers without a message.
const downgradePoll = 250 * time.Millisecond

// readKind is the read half of a read-write lock.
type readKind struct{ rwNames }

func (k *readKind) field(owner string) string { return owner }
func (k *readKind) role() string              { return "read" }
func (k *readKind) renewer() renewer          { return readRenewer{} }
func (k *readKind) label() string             { return KindRead }

func (k *readKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	return attemptReply(k.c.drv.Run(ctx, r.check, scripts.RWReadAcquire, []string{k.name, layout.ReadHoldPrefix(k.name, r.owner), k.token},
		millis(r.lease), r.owner, layout.WriteField(r.owner), fenceArg(r), millis(downgradePoll)))
}

func (k *readKind) release(ctx context.Context, r request) (releaseResult, error) {
	keys := []string{k.name, k.channelName, layout.ReadHoldPrefix(k.name, r.owner), layout.HashTag(k.name)}
	return releaseReply(k.c.drv.Run(ctx, nil, scripts.RWReadRelease, keys, unlockMessage, r.owner, k.c.publish))
}

func (k *readKind) forceRelease(ctx context.Context) (bool, error) {
	return k.forceReleaseMode(ctx, "read", unlockMessage)
}

// writeKind is the write half of a read-write lock.
type writeKind struct{ rwNames }

func (k *writeKind) field(owner string) string { return layout.WriteField(owner) }
func (k *writeKind) role() string              { return "write" }
func (k *writeKind) renewer() renewer          { return hashRenewer{} }
func (k *writeKind) label() string             { return KindWrite }

// upgradeRefused is the write acquire script's answer to an owner that
// holds read locks only.
const upgradeRefused = -1

func (k *writeKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	cmd, _ := k.c.drv.Run(ctx, r.check, scripts.RWWriteAcquire, []string{k.name, k.token},
		millis(r.lease), layout.WriteField(r.owner), r.owner, fenceArg(r))
	res, err := cmd.Int64Slice()
	if err != nil {
		return attemptResult{}, err
	}
	if len(res) == 2 && res[0] == upgradeRefused {
		return attemptResult{}, fmt.Errorf("%w: the lock context holds a read lock on it", ErrUpgrade)
	}
	return parseAttempt(res)
}

func (k *writeKind) release(ctx context.Context, r request) (releaseResult, error) {
	return releaseReply(k.c.drv.Run(ctx, nil, scripts.RWWriteRelease, []string{k.name, k.channelName},
		readUnlockMessage, layout.WriteField(r.owner), k.c.publish))
}

func (k *writeKind) forceRelease(ctx context.Context) (bool, error) {
	return k.forceReleaseMode(ctx, "write", readUnlockMessage)
}
