package dlock

import (
	"errors"

	"github.com/dlock-go/dlock/internal/transport"
)

// Sentinel errors. Match them with errors.Is: the errors dlock returns wrap
// them with the lock's name and, where there is one, the Redis error or the
// context's error.
var (
	// ErrNotObtained is returned when a lock could not be taken: TryLock found
	// it held, or Lock's context ended first (the error then also wraps
	// ctx.Err()).
	ErrNotObtained = errors.New("dlock: lock not obtained")

	// ErrNotHeld is returned by Unlock when the owner in the context does
	// not hold the lock: it was never taken, already released, expired, or
	// taken from it.
	ErrNotHeld = errors.New("dlock: lock not held by this owner")

	// ErrLockLost is the cause (see context.Cause) with which a lock context
	// is cancelled when the lock is gone while its holder still believed it
	// held it: the key was deleted, the lease ran out, or the watchdog could
	// not renew it in time.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrUnlocked is the cause with which a lock context is cancelled when
	// its hold is released by Unlock.
	ErrUnlocked = errors.New("dlock: unlocked")

	// ErrClosed is returned by every call on a closed Client, and is the
	// cause with which Close cancels the lock contexts it still has.
	ErrClosed = errors.New("dlock: client closed")

	// ErrNotReplicated is returned by Lock and TryLock on a Client made
	// with WithReplicaSync when the acquisition was not acknowledged by
	// enough replicas in time: the lock (or the permit) was given back,
	// since a failover could have lost it. The synchronizers' writes report
	// it too (see WithReplicaSync for what each one leaves behind). Its
	// text says "write", since it may be a lock's, a permit's or a
	// synchronizer's.
	ErrNotReplicated = transport.ErrNotReplicated

	// ErrUpgrade is returned when the owner of a read lock asks for the
	// write lock of the same RWMutex: the write lock waits for every reader
	// to leave, the owner's own read holds included, so waiting would never
	// end. Release the read holds first. (A writer may take read locks:
	// that downgrade is allowed.)
	ErrUpgrade = errors.New("dlock: cannot upgrade a read lock to a write lock")

	// ErrNotReentrant is returned by Lock and TryLock on a Mutex or
	// FairMutex made WithoutReentry when the lock context passed holds the
	// lock already: waiting would never end, since the owner would wait
	// for itself (Redisson's non-reentrant locks throw
	// IllegalMonitorStateException). Nothing is sent to Redis, and the
	// hold stands.
	ErrNotReentrant = errors.New("dlock: lock is not reentrant")

	// ErrUnreachable is returned by Client.Ping when Redis does not
	// answer, and by TryLock and the synchronizers' calls (Semaphore,
	// PermitSemaphore, CountDownLatch writes), at once and without a
	// command, while the Client's probe cannot reach Redis after a dial
	// failed (see docs/safety.md): nothing was applied, and the call is
	// safe to make again. Lock and a waiting Acquire wait for Redis
	// instead, as long as their ctx allows. The error wraps the Redis
	// client's or the dial's error too.
	ErrUnreachable = transport.ErrUnreachable
	// ErrInvalidName is returned for an empty, too long or cluster-unsafe
	// lock name.
	ErrInvalidName = errors.New("dlock: invalid lock name")

	// ErrInvalidOption is returned for an option value out of range, such
	// as a lease that is not positive.
	ErrInvalidOption = errors.New("dlock: invalid option")
)
