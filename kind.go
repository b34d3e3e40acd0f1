package dlock

import (
	"context"
	"time"
)

// kind is what one kind of lock contributes to the shared engine: its
// scripts and its rules. The engine (acquire.go, hold.go, renew.go) does the
// rest for every kind: waiting, ownership, lock contexts, the watchdog and
// lost-lock notices.
type kind interface {
	// key is the Redis key that holds the lock.
	key() string
	// field is the hash field that counts owner's holds.
	field(owner string) string
	// role tells apart locks that share a key, such as the read and write
	// halves of a read-write lock ("" for a plain lock).
	role() string
	// channel is where the wake-ups for owner's waits are published; ""
	// when the kind has no unlock messages (RedLock: its nodes share no
	// channel), and waiters retry after the ttl an attempt reports.
	channel(owner string) string
	// attempt makes one try at acquiring.
	attempt(ctx context.Context, r request) (attemptResult, error)
	// release gives back one hold.
	release(ctx context.Context, r request) (releaseResult, error)
	// abandon is called when owner stops waiting without the lock, for
	// kinds that keep waiters in Redis (the fair lock's queue).
	abandon(ctx context.Context, r request) error
	// forceRelease deletes the lock whoever holds it.
	forceRelease(ctx context.Context) (bool, error)
	// renewer renews this kind's holds for the watchdog.
	renewer() renewer
}

// request is one call to a kind's script.
type request struct {
	owner string
	id    string        // unique per call; names the call's latch key
	lease time.Duration // lease to set
	wait  bool          // the caller will wait if the attempt fails
	fence bool          // increment the fencing token
}

type attemptResult struct {
	acquired bool
	token    int64         // fencing token, when acquired and fenced
	ttl      time.Duration // when not acquired: how long the current hold has left
	// reason, when not acquired, says why in more detail than "held by
	// another owner" (RedLock: which nodes refused); it is wrapped into the
	// ErrNotObtained error.
	reason error
}

// drifter is implemented by kinds whose lease runs on clocks other than the
// local one in a way the engine must allow for (RedLock: several servers'
// clocks). The engine counts a hold as valid for lease - drift(lease) after
// the request that set the lease was sent.
type drifter interface {
	drift(lease time.Duration) time.Duration
}

// validity is how long after it was sent a request that set lease keeps
// the lock, on the local clock.
func validity(k kind, lease time.Duration) time.Duration {
	if d, ok := k.(drifter); ok {
		return lease - d.drift(lease)
	}
	return lease
}

type releaseResult int

const (
	released  releaseResult = iota + 1 // the lock is free now
	stillHeld                          // the owner still holds it (reentrant)
	notHeld                            // the owner did not hold it
)

// millis converts a duration for a script argument, rounding up so that a
// positive duration never becomes zero (PEXPIRE 0 deletes the key).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
