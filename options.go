package dlock

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults, as in Redisson.
const (
	// DefaultWatchdogTimeout is the lease of a lock taken without WithLease.
	// The watchdog renews such locks every third of it while they are held.
	DefaultWatchdogTimeout = 30 * time.Second

	// DefaultRenewalBatchSize is how many locks one renewal script call
	// renews at most.
	DefaultRenewalBatchSize = 100

	// MaxLease is the longest lease dlock accepts.
	MaxLease = 30 * 24 * time.Hour

	// DefaultFairWaitTimeout is how long a FairMutex waiter may stay silent
	// before the others skip it: Redisson's fairLockWaitTimeout.
	DefaultFairWaitTimeout = 5 * time.Minute
)

// minWatchdogTimeout keeps the renewal interval above a few milliseconds.
const minWatchdogTimeout = 30 * time.Millisecond

// Option configures a Client.
type Option func(*config)

type config struct {
	watchdogTimeout time.Duration
	batchSize       int
	logger          *slog.Logger
	replicas        replicaSync     // WithReplicaSync; off by default
	shardedPubSub   *bool           // WithShardedPubSub; nil: probe the cluster (newHub)
	obs             *observers      // WithObserver (observe.go); nil without
	clientName      string          // WithClientName
	deadlocks       *deadlockConfig // WithDeadlockDetection (deadlock.go); nil without
}

func defaultConfig() config {
	return config{
		watchdogTimeout: DefaultWatchdogTimeout,
		batchSize:       DefaultRenewalBatchSize,
		logger:          slog.Default(),
	}
}

func (c config) validate() error {
	switch {
	case c.watchdogTimeout < minWatchdogTimeout || c.watchdogTimeout > MaxLease:
		return fmt.Errorf("%w: watchdog timeout %v is outside [%v, %v]", ErrInvalidOption, c.watchdogTimeout, minWatchdogTimeout, MaxLease)
	case c.batchSize < 1 || c.batchSize > 10000:
		return fmt.Errorf("%w: renewal batch size %d is outside [1, 10000]", ErrInvalidOption, c.batchSize)
	case c.logger == nil:
		return fmt.Errorf("%w: nil logger", ErrInvalidOption)
	case len(c.clientName) > maxClientName:
		return fmt.Errorf("%w: client name of %d bytes is longer than %d", ErrInvalidOption, len(c.clientName), maxClientName)
	}
	if err := c.deadlocks.validate(); err != nil {
		return err
	}
	return c.replicas.validate()
}

// WithWatchdogTimeout sets the lease of locks taken without WithLease; the
// watchdog renews them every third of it. The default is
// DefaultWatchdogTimeout (30 s).
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *config) { c.watchdogTimeout = d }
}

// WithRenewalBatchSize sets how many locks one renewal script call renews
// at most. The default is DefaultRenewalBatchSize (100).
func WithRenewalBatchSize(n int) Option {
	return func(c *config) { c.batchSize = n }
}

// WithLogger sets where the Client logs renewal failures, lost locks and
// releases that needed retries. The default is slog.Default(); pass
// slog.New(slog.DiscardHandler) to silence it.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithClientName sets a label that tools show for the locks the Client
// holds, next to its host, pid and program: dlock status, dlock list and
// the dlock unlock prompt print it. It is stored in the Client's holder
// record (the Redis hash "dlock:client:<clientID>", written at the first
// lock attempt; see docs/how-it-works.md), which anyone who can read Redis
// can read: do not put secrets in it. At most 256 bytes; the default is
// none, and tools then show the program's name.
func WithClientName(name string) Option {
	return func(c *config) { c.clientName = name }
}

// WithReplicaSync makes every acquisition wait until at least n replicas of
// the lock's master have acknowledged the write, for at most timeout (Redis
// WAIT, sent on the connection that ran the acquire script). When fewer
// acknowledge, the acquisition is given back and Lock and TryLock return an
// error wrapping ErrNotReplicated. It narrows, but does not close, the
// window in which a failover loses a lock that was just taken (Redisson's
// checkLockSyncedSlaves). timeout must be shorter than the Redis client's
// read timeout. It needs a *redis.Client (plain or Sentinel) or a
// *redis.ClusterClient. Off by default.
//
// The synchronizers' writes wait for the replicas too, as Redisson's do:
// Semaphore Acquire, TryAcquire, Release, AddPermits and TrySetPermits;
// PermitSemaphore Acquire, TryAcquire, Release, ReleaseID, AddPermits,
// TrySetPermits and SetPermits; CountDownLatch TrySetCount and CountDown.
// An acquire that too few replicas acknowledged gives its permits back and
// fails with an error wrapping ErrNotReplicated, as a Lock does. Any other
// write stands on the master (it is not undone: undoing a release or a
// count-down would be a write of its own, no better replicated) and its
// call returns its usual result with an error wrapping ErrNotReplicated
// that says so; do not repeat the call. Lease renewals, DrainPermits and
// deletes do not wait.
func WithReplicaSync(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas = replicaSync{replicas: n, timeout: timeout} }
}

// WithShardedPubSub chooses how unlock messages travel on a
// *redis.ClusterClient. On, scripts publish with SPUBLISH and waiters
// SSUBSCRIBE on the shard that owns the lock's slot (Redis 7+), so a
// message reaches only that shard's nodes. Off, they use PUBLISH and
// SUBSCRIBE, which a cluster broadcasts to every node. The two do not hear
// each other: every dlock and Redisson client sharing a lock must make the
// same choice.
//
// Without this option New chooses as Redisson's default
// (shardedSubscriptionMode AUTO) does: it sends PUBSUB SHARDNUMSUB once,
// and uses sharded pub/sub if the cluster answers, classic pub/sub if it
// replies with an error (a cluster older than Redis 7, or an ACL user
// without the pubsub command, +pubsub). If the cluster cannot be reached at
// all, New picks sharded pub/sub and logs a warning. Set the option when
// Redisson runs with shardedSubscriptionMode ON or OFF, or to skip the
// probe. Other clients always use PUBLISH and SUBSCRIBE.
func WithShardedPubSub(on bool) Option {
	return func(c *config) { c.shardedPubSub = &on }
}

// LockOption configures one lock handle.
type LockOption func(*lockConfig)

type lockConfig struct {
	lease       time.Duration // used when hasLease; otherwise the watchdog renews
	hasLease    bool
	fenced      bool
	nodeTimeout time.Duration // RedLock: bound on each node's reply; 0 means the default
	fairWait    time.Duration // FairMutex: WithFairWaitTimeout; 0 means the default
	spinInitial time.Duration // SpinLock: WithBackoff; 0 means the default
	spinMax     time.Duration
	noReentry   bool        // Mutex, FairMutex: WithoutReentry
	specific    kindOptions // the kind-specific options given
}

// kindOptions is a set of the lock options that apply to some kinds only.
// Each kind's constructor declares the set it takes (newHandle's takes),
// and the options given outside it are refused.
type kindOptions uint8

const (
	optNodeTimeout kindOptions = 1 << iota // WithNodeTimeout: RedLock
	optFairWait                            // WithFairWaitTimeout: FairMutex
	optBackoff                             // WithBackoff: SpinLock
	optNoReentry                           // WithoutReentry: Mutex, FairMutex
)

// optionNames names each kind-specific option for errors.
var optionNames = map[kindOptions]string{optNodeTimeout: "WithNodeTimeout", optFairWait: "WithFairWaitTimeout",
	optBackoff: "WithBackoff", optNoReentry: "WithoutReentry"}

// accept refuses the kind-specific options given that a lock of kind does
// not take.
func (c lockConfig) accept(kind string, takes kindOptions) error {
	for o := kindOptions(1); o != 0 && o <= c.specific; o <<= 1 {
		if c.specific&o != 0 && takes&o == 0 {
			return fmt.Errorf("%w: %s does not apply to a %s", ErrInvalidOption, optionNames[o], kind)
		}
	}
	return nil
}

func (c lockConfig) validate() error {
	if c.hasLease && (c.lease < time.Millisecond || c.lease > MaxLease) {
		return fmt.Errorf("%w: lease %v is outside [1ms, %v]", ErrInvalidOption, c.lease, MaxLease)
	}
	if c.nodeTimeout < 0 {
		return fmt.Errorf("%w: node timeout %v is negative", ErrInvalidOption, c.nodeTimeout)
	}
	if c.fairWait != 0 && (c.fairWait < 2*time.Millisecond || c.fairWait > MaxLease) {
		return fmt.Errorf("%w: fair wait timeout %v is outside [2ms, %v]", ErrInvalidOption, c.fairWait, MaxLease)
	}
	return c.validateBackoff()
}

// WithLease gives every acquisition through the handle a fixed lease: the
// lock expires after d unless released first, and no watchdog renews it.
// Without it, the lease is the Client's watchdog timeout and the watchdog
// renews the lock while it is held. The lock context is cancelled with
// ErrLockLost when the lease runs out.
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) { c.lease, c.hasLease = d, true }
}

// WithFencing makes every acquisition through the handle, reentrant ones
// included, take a fencing token from a counter per lock name (Redisson's
// FencedLock counter, key redisson_lock_token:{name}): every owner's
// tokens are above every earlier owner's, and never go down, also across
// a failover that lost the counter's last increments: a token is at least
// the server's clock in microseconds (see docs/safety.md for the clock
// assumption). (One owner can see a token again: a re-sent command, or a
// re-entry after a downgrade's read took the next one, keeps the last
// token.) A re-entry's token is above its owner's earlier one even when
// the counter was deleted or set back meanwhile. Read it with Token, or
// with its holder with FenceOf. A resource
// that remembers the highest token it has seen and rejects lower ones, and
// the same one from another holder (FencedSet, FencedHSet, CheckToken), is
// safe against a holder that paused past its lease.
func WithFencing() LockOption {
	return func(c *lockConfig) { c.fenced = true }
}

// WithNodeTimeout bounds how long a RedLock waits for each node's reply to
// one request, so that a slow or frozen node costs at most d per attempt.
// It must be much smaller than the lease (at most a tenth of it); the
// default is DefaultNodeTimeout (100 ms). Other lock kinds refuse it
// (ErrInvalidOption).
func WithNodeTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) { c.nodeTimeout, c.specific = d, c.specific|optNodeTimeout }
}

// WithFairWaitTimeout sets how long a FairMutex waiter may go without
// showing it is alive (a waiting Lock shows it at least every d/2) before
// the waiters behind it skip it: the most a waiter whose process died can
// hold up the queue once the lock is free. The default is
// DefaultFairWaitTimeout (5 min), Redisson's fairLockWaitTimeout. Other
// lock kinds refuse it (ErrInvalidOption).
func WithFairWaitTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) { c.fairWait, c.specific = d, c.specific|optFairWait }
}

// WithoutReentry makes a Mutex or a FairMutex non-reentrant, as
// Redisson's non-reentrant lock and non-reentrant fair lock (4.4.0): a
// Lock or TryLock with a lock context that holds the lock already (or one
// derived from it) fails at once with ErrNotReentrant instead of
// re-entering, and the hold stands. Other owners wait and take turns as
// usual. The layout in Redis is the reentrant kind's, so Go and Java
// holders, reentrant or not, exclude each other. Other lock kinds refuse
// it (ErrInvalidOption).
func WithoutReentry() LockOption {
	return func(c *lockConfig) { c.noReentry, c.specific = true, c.specific|optNoReentry }
}
