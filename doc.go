// Package dlock provides distributed locks on Redis with Redisson's design
// and data layout: reentrant locks whose lease a watchdog renews while the
// holder lives, waiters woken by pub/sub rather than polling, and fencing
// tokens. A Go service using dlock and a Java service using Redisson
// exclude each other on the same lock name.
//
// # Use
//
// Create one Client per process on the go-redis client you already have,
// then a handle per lock name:
//
//	locks, err := dlock.New(rdb)
//	m, err := locks.NewMutex("billing:account:42")
//	lockCtx, err := m.Lock(ctx) // a ctx deadline bounds the wait
//	if err != nil { ... }
//	defer m.Unlock(lockCtx)
//	doWork(lockCtx) // lockCtx is cancelled if the lock is lost
//
// # Lock kinds
//
// All kinds share one engine for acquiring, waiting, renewing, lock
// contexts and fencing, and the methods Lock, TryLock, Unlock, ForceUnlock,
// IsLocked, HoldCount, TTL and Name:
//
//   - Mutex (Client.NewMutex): reentrant, Redisson RLock.
//   - FairMutex (Client.NewFairMutex): first come, first served across
//     processes, Redisson FairLock.
//   - SpinLock (Client.NewSpinLock): the Mutex's layout without pub/sub;
//     waiters back off, Redisson RSpinLock.
//   - RWMutex (Client.NewRWMutex): many readers or one writer, Redisson
//     ReadWriteLock; ReadLock and WriteLock are its two halves.
//   - MultiLock (NewMultiLock): several locks, all or nothing.
//   - RedLock (NewRedLock): one lock on a majority of independent servers.
//
// WithoutReentry makes a Mutex or FairMutex non-reentrant (Redisson's
// non-reentrant locks): a re-entry fails with ErrNotReentrant.
//
// A Client works on a plain, Sentinel (failover) or Cluster go-redis client;
// on a Redis 7 cluster, unlock messages use sharded pub/sub.
//
// # Semaphores and latches
//
// Also in Redisson's layout, so that Java processes can share them:
//
//   - Semaphore (Client.NewSemaphore): counting permits without owner or
//     lease, Redisson RSemaphore. It has no permits until set up
//     (TrySetPermits, AddPermits): Acquire on one never set up waits.
//   - PermitSemaphore (Client.NewPermitSemaphore): permits with an id and
//     a lease, back when their holder dies, Redisson
//     RPermitExpirableSemaphore.
//   - CountDownLatch (Client.NewCountDownLatch): waits until a count set
//     with TrySetCount reaches zero, Redisson RCountDownLatch.
//
// # Ownership
//
// Go has no thread id, so ownership travels in the lock context that Lock
// returns. Pass it down the call chain: a Lock with it, or with a context
// derived from it, re-enters the lock and increments the hold count, like a
// Java thread taking an RLock again (the Client counts re-entries; Redis
// only knows that the owner holds the lock). Two goroutines that share a
// handle but not the lock context are two owners and exclude each other;
// goroutines started with a lock context (an errgroup under a lock) share
// its owner, and so do not exclude each other on a nested lock: give each
// its own context for locks they must not share.
// Each successful Lock returns its own context; Unlock with it ends that
// context with cause ErrUnlocked, and the lock is free when every hold is
// released.
//
// # Deadlines and failures
//
// A ctx deadline is the longest a Lock or TryLock waits, even when Redis
// stops answering: cleanup (giving back a hold an abandoned attempt took,
// leaving a fair queue) goes on in the background. Unlock returns by the
// deadline of the context it is given (derive one from the lock context),
// and a release that failed for a reason that may pass keeps being retried
// in the background until the lease ends. A command that go-redis sends
// again after a lost reply is never applied twice, and no request writes a
// key of its own: a lock costs Redis its own keys only. Client.Ping checks
// the connection at startup (ErrUnreachable).
//
// # Leases and the watchdog
//
// A lock taken without WithLease has a lease of the Client's watchdog
// timeout (30 s by default), renewed by the Client's watchdog every third
// of it, in batches, while the lock is held. WithLease gives a fixed lease
// and no renewal (Extend moves it); the watchdog still checks such a hold
// every interval. Either way the lock context is cancelled with cause
// ErrLockLost (see context.Cause) within one interval of the lock being
// gone (deleted, taken over), or when it was not renewed before its lease
// ran out on the local monotonic clock, and the loss is logged
// (slog.Default unless WithLogger). Work done under a lock should watch
// that context.
//
// # What a lease lock can promise
//
// A lease lock gives mutual exclusion only while every holder finishes its
// critical section within its lease, as measured by Redis. A holder that
// pauses (GC, SIGSTOP, a slow disk) past its lease, a Redis failover that
// loses an unreplicated write, or a clock step on the Redis server can let
// two holders in at once. dlock narrows these windows (the watchdog, the
// lost-lock context) but cannot close them; a resource that must never see
// two writers should check a fencing token (WithFencing, FenceOf) and
// reject tokens lower than the highest it has seen, and the same token
// from another holder: FencedSet and FencedHSet do that for data in
// Redis, CheckToken for SQL databases.
package dlock
