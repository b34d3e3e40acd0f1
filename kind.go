package dlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// kind is what one kind of lock contributes to the shared engine: its
// scripts and its rules. The engine (acquire.go, send.go, wait.go,
// release.go, hold.go, renew.go; docs/architecture.md) does the rest for
// every kind: waiting, ownership and re-entry counts, lock contexts, the
// watchdog and lost-lock notices.
//
// A kind's scripts are safe to run twice, which is what a Redis client does
// when a reply is lost: acquire sets the owner's field to 1 whether it is
// there or not (the Client, not Redis, counts re-entries), and release
// deletes the owner's field, so a second run finds nothing (the transport
// tells the engine when it re-sent). No request writes a key of its own.
type kind interface {
	// key is the Redis key that holds the lock.
	key() string
	// lockName is the lock's name as the user gave it, for errors and
	// logs (today every kind's key is its name; the two may part).
	lockName() string
	// field is the hash field that marks owner's hold.
	field(owner string) string
	// role tells apart locks that share a key, such as the read and write
	// halves of a read-write lock ("" for a plain lock).
	role() string
	// channel is where the wake-ups for owner's waits are published; ""
	// when the kind has no unlock messages (RedLock: its nodes share no
	// channel), and waiters retry after the ttl an attempt reports.
	channel(owner string) string
	// attempt makes one try at taking the lock for r.owner, or at
	// confirming that r.owner holds it (a re-entry), setting the lease.
	attempt(ctx context.Context, r request) (attemptResult, error)
	// release gives back r.owner's hold, whatever its re-entry count.
	release(ctx context.Context, r request) (releaseResult, error)
	// forceRelease deletes the lock whoever holds it.
	forceRelease(ctx context.Context) (bool, error)
	// renewer renews this kind's holds for the watchdog.
	renewer() renewer
	// label is the Kind this kind's events report to observers
	// (LockInfo.Kind): each kind declares its own, so that observe.go
	// names none.
	label() string
}

// leaver is implemented by kinds that keep waiters in Redis (the fair
// lock's queue): leave is called when owner stops waiting without the
// lock. holding says that the owner was not queued but holds the lock (a
// release of another Client handed it over): it is given back.
type leaver interface {
	leave(ctx context.Context, r request) (holding bool, err error)
	// holdsUp is how long a waiter that stopped waiting without leaving
	// can hold the other waiters up: a leave that fails is sent again
	// for that long.
	holdsUp() time.Duration
}

// selfKept is implemented by kinds whose acquisitions the kind keeps
// itself, outside the hold registry (a PermitSemaphore's permits: each is
// an entry of the lease keeper of its own). newOwner makes the owner of
// each attempt (a permit's id), so there is no re-entry, ctx's owner is
// not used, and what a failed attempt may have taken is given back apart
// from the next attempt's; keep records one that was acquired by a request
// sent at start and returns its context (the permit context). Everything else
// (sending, giving back, late replies, replica sync, waiting, observers)
// the engine does as for any kind.
type selfKept interface {
	newOwner() (string, error)
	keep(ctx context.Context, req request, start time.Time) (context.Context, error)
}

// countedWakes is implemented by kinds whose messages say how many
// waiters can go on (a PermitSemaphore's: the permits available): their
// waiters subscribe as counting waiters (pubsub.SubscribeCounted), so a
// message "n" wakes n of a Client's waiters, not all of them.
type countedWakes interface {
	countedWakes()
}

// patient is implemented by kinds whose waiting acquisitions go on trying
// while Redis does not answer (a failover or a restart under way), for up
// to patience, rather than return the first such error, and poll through
// a sleep whose subscription failed: their attempts are safe to repeat,
// each giving back what it may have taken.
type patient interface {
	patience() time.Duration
}

// request is one call to a kind's script.
type request struct {
	owner string
	// fresh is set for an owner made for this Lock (the ctx carried
	// none): it holds nothing and waits for nothing yet.
	fresh bool
	lease time.Duration // lease to set
	wait  bool          // the caller will wait if the attempt fails
	fence bool          // increment the fencing token
	// reentry is set when the owner holds the lock through this Client
	// already: the attempt confirms the hold, and there is nothing to
	// give back if the caller does not take it.
	reentry bool
	// queued is set once the Lock has waited in this Client's queue, where
	// a release may hand the lock over to it (handoff.go).
	queued bool
	// token is the owner's latest fencing token on a re-entry, 0 if none.
	token int64
	// check, when set, receives the outcome of the replica sync that
	// follows an acquire script (WithReplicaSync): kinds pass it to the
	// transport's Run with their acquire scripts.
	check *transport.Check
}

type attemptResult struct {
	acquired bool
	lost     bool          // a re-entry found the owner's hold gone
	token    int64         // fencing token, when acquired and fenced
	ttl      time.Duration // when not acquired: how long the current hold has left
	// more, when acquired, says that more is left for other waiters (a
	// semaphore's permits): a counting waiter passes its wake-up on.
	more bool
	// reason, when not acquired, says why in more detail than "held by
	// another owner" (RedLock: which nodes refused); it is wrapped into the
	// ErrNotObtained error.
	reason error
	// seq, when not acquired and the kind hands over by message (the
	// fair lock), is the server's clock in microseconds when the attempt
	// ran: a hand-over message from before it is no grant (handedOver).
	seq int64
}

type releaseResult int

const (
	released releaseResult = iota + 1 // the owner's hold is gone
	notHeld                           // the owner did not hold the lock
)

// drift is the allowance taken off every lease on the local clock: a
// hold counts as valid for lease - drift(lease) after the request that set
// the lease was sent. The lease runs on the Redis server's clock (on
// several servers' for a RedLock), and the lock context's cancellation is
// a timer that fires late under load; without the allowance the next
// owner could be granted the lock in Redis while this one's context still
// stands. lease/100 + 2ms is Redlock's allowance for clock rates and timer
// precision (antirez/redlock-rb), used for every kind.
func drift(lease time.Duration) time.Duration {
	return lease/100 + 2*time.Millisecond
}

// validity is how long after it was sent a request that set lease keeps
// the lock, on the local clock.
func validity(lease time.Duration) time.Duration {
	return lease - drift(lease)
}

// Messages on a lock's channel, as in Redisson.
const (
	unlockMessage     = "0" // the lock is free: wake one waiter
	readUnlockMessage = "1" // a write lock is free: wake every reader
)

// Kinds run their scripts with the Client's driver (c.drv.Run) and read
// the replies with attemptReply and releaseReply, which take Run's results
// as they are: k.c.drv.Run is then called straight from the kind's method,
// and the path from Lock to go-redis has no frame of these helpers.

// attemptReply reads the reply of an acquire script, {1, token} when the
// owner holds the lock and {0, pttl} when not (see parseAttempt).
func attemptReply(cmd *redis.Cmd, _ bool) (attemptResult, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return attemptResult{}, err
	}
	return parseAttempt(res)
}

// releaseReply reads the reply of a release script, 1 or 0 when the
// owner's hold is gone and -1 when the owner held none. A -1 to a command
// the Redis client sent more than once (resent) is the answer to the
// repeat: the first run released the hold and its reply was lost.
func releaseReply(cmd *redis.Cmd, resent bool) (releaseResult, error) {
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return 0, err
	case n < 0 && !resent:
		return notHeld, nil
	}
	return released, nil
}

// parseAttempt reads the {acquired, token-or-pttl} reply of acquire scripts.
func parseAttempt(res []int64) (attemptResult, error) {
	if len(res) != 2 {
		return attemptResult{}, errors.New("unexpected reply from the acquire script")
	}
	switch res[0] {
	case 1:
		return attemptResult{acquired: true, token: res[1]}, nil
	case -2:
		return attemptResult{lost: true}, nil
	}
	ttl := time.Duration(res[1]) * time.Millisecond
	if res[1] == -2 {
		ttl = 0 // freed in between: try again at once
	}
	return attemptResult{ttl: ttl}, nil
}

// millis converts a duration for a script argument, rounding up so that a
// positive duration never becomes zero (PEXPIRE 0 deletes the key).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// fenceArg is the fencing and re-entry argument of acquire scripts
// (fence.lua): "-1" not fenced, "-3" a re-entry not fenced, "0" a fenced
// first acquisition, the owner's previous token for a fenced re-entry, "-2"
// for a fenced re-entry without one.
func fenceArg(r request) string {
	switch {
	case !r.fence && r.reentry:
		return "-3"
	case !r.fence:
		return "-1"
	case !r.reentry:
		return "0"
	case r.token == 0:
		return "-2"
	}
	return strconv.FormatInt(r.token, 10)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }

// eval runs a script with the Client's transport and returns its command,
// for callers that need not know whether it was sent twice.
func (c *Client) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd, _ := c.drv.Run(ctx, nil, s, keys, args...)
	return cmd
}

// forceLatchTTL is how long the latch of a force release outlives a Client
// that could not delete it after the reply (a broken connection): long
// enough for the Redis client's own retries of one command.
const forceLatchTTL = 30 * time.Second

// forceScript runs a force-release script, whose last key is a fresh
// request latch: a command re-sent after a lost reply answers as the first
// run did, rather than deleting a lock another owner took in between. The
// latch is deleted as soon as the answer is in, as Redisson does with its
// unlock latch.
func (c *Client) forceScript(ctx context.Context, s *redis.Script, keys []string, args ...any) (bool, error) {
	n, err := c.eval(ctx, s, keys, append(args, millis(forceLatchTTL))...).Int64()
	if err == nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		c.drv.Del(dctx, keys[len(keys)-1])
	}
	return n == 1, err
}

// selfGated is implemented by kinds whose requests must not wait on their
// Client's reach gate (internal/transport reach.go): RedLock, whose
// requests go to several servers, each a Client with a gate of its own,
// and whose quorum needs only some of them. The engine asks reachGate, so
// that it never names a kind.
type selfGated interface {
	selfGated()
}

// oneRun is implemented by kinds whose attempt is a single script Run and
// nothing else (a Mutex's): the transport can leave that script on the
// wire when the caller's ctx ends and give back what it took once its
// reply is in, so the engine makes such an attempt on the caller's
// goroutine (handle.mayLeave) rather than hand it to another.
type oneRun interface {
	oneRun()
}

// reachGate is the reach gate that the engine's requests for k wait on:
// the Client's, or one that stays open for a kind that is selfGated.
func reachGate(c *Client, k kind) *transport.Gate {
	if _, ok := k.(selfGated); ok {
		return transport.Open
	}
	return c.drv.Gate()
}
