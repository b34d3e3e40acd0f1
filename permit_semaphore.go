package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// noExpiryScore is Redisson's score for a permit without lease: exactly
// this text, which Lua compares as a string and Java parses as a long.
const noExpiryScore = "922337203685477"

// PermitSemaphore is a semaphore whose permits expire, in Redis with
// Redisson's RPermitExpirableSemaphore layout: the key name holds the
// number of available permits, the sorted set {name}:timeout maps each
// permit held (an id of 16 random bytes) to its expiry in epoch
// milliseconds, and every script first returns expired permits to the pool
// and publishes the new count on redisson_sc:{name}. Go and Java (Redisson)
// processes can share one.
//
// A permit is held by a permit context, as a lock by its lock context: it
// ends with Release, and it is cancelled with cause ErrLockLost if the
// permit expires or is taken back first. A permit comes back to the pool
// when its holder dies, once its lease has run out: this is what makes "at
// most N workers, crash-safe" possible.
//
// Leases: by default a permit's lease is the Client's watchdog timeout
// (WithWatchdogTimeout, 30s), renewed every third of it while the permit is
// held by the watchdog that renews the Client's locks, so a live holder
// keeps it as long as it needs and a dead one's comes back within one
// timeout. Redisson's permits without lease never expire (score
// 922337203685477); dlock writes one only when asked (NoPermitLease), and
// reads them as permits that do not expire. With WithPermitLease each
// permit has a fixed lease, not
// renewed; the watchdog checks it all the same, so that a permit taken
// back (ReleaseID, Delete) is noticed within a third of the watchdog
// timeout, as a lock's hold is.
//
// Expiry runs on the Redis server's clock: the scripts write a permit's
// expiry as the server's TIME plus the lease and reclaim against it, so a
// client's wall clock, ahead or stepped, cannot reclaim the permits others
// hold. Redisson's Java client still uses its own clock in its own
// scripts: with Java clients on the semaphore, keep their clocks in step
// with the server's (NTP).
//
// A PermitSemaphore is safe for concurrent use; its methods fail with
// ErrClosed once its Client is closed, and Close cancels the permit
// contexts with cause ErrClosed (their permits expire with their leases).
type PermitSemaphore struct {
	c        *Client
	name     string
	timeouts string
	channel  string
	lease    time.Duration // fixed lease; 0: the watchdog renews
	// h runs Acquire and TryAcquire on the engine (acquire.go), with the
	// permit as the kind (psemKind): each acquisition is a permit of its
	// own, its owner the permit's id.
	h handle
}

// PermitOption configures a PermitSemaphore.
type PermitOption func(*PermitSemaphore)

// WithPermitLease gives each permit a fixed lease d (at least 1ms, at most
// MaxLease), not renewed: the permit context is cancelled when it runs out.
// With d = NoPermitLease permits never expire. UpdateLease changes it for
// one permit.
func WithPermitLease(d time.Duration) PermitOption {
	return func(s *PermitSemaphore) { s.lease = d }
}

// NoPermitLease, given to WithPermitLease or UpdateLease, makes permits
// that never expire, as Redisson's acquire() without a lease (its
// default): in Redis the permit's expiry is Redisson's no-expiry score
// 922337203685477, so a Java client sees a permit without lease
// (getLeaseTime -1). Such a permit is not renewed and its permit context
// is not cancelled by time; the watchdog still checks it, so that one
// taken back (ReleaseID, Delete) is noticed within a third of the watchdog
// timeout. It comes back to the pool only when released: a holder that
// dies keeps it for good, which is why dlock's default is the watchdog
// lease and not this one.
const NoPermitLease time.Duration = -1

// foreverLease is how a permit without lease (NoPermitLease) is kept in
// this process: a lease that no process outlives. The scripts are given
// "-1" instead (leaseArg), and write the no-expiry score.
const foreverLease = 100 * 365 * 24 * time.Hour

// leaseArg is the lease argument of the permit scripts (psem_clock.lua):
// lease in ms, which the script adds to the server's clock, or "-1" for a
// permit without lease (Redisson's no-expiry score). The expiry is not
// computed here: on the client's clock, a client whose clock is ahead
// would reclaim the permits of the others early.
func leaseArg(lease time.Duration) any {
	if lease >= foreverLease {
		return "-1"
	}
	return millis(lease)
}

// NewPermitSemaphore returns the permit semaphore called name. It does not
// touch Redis: a semaphore that was never set has no permits (see
// TrySetPermits, SetPermits and AddPermits). The name follows the rules of
// lock names (ErrInvalidName).
func (c *Client) NewPermitSemaphore(name string, opts ...PermitOption) (*PermitSemaphore, error) {
	if err := newSync(c, name); err != nil {
		return nil, err
	}
	s := &PermitSemaphore{c: c, name: name, timeouts: layout.Suffixed(name, "timeout"), channel: layout.Prefixed(layout.SemChannelPrefix, name)}
	for _, o := range opts {
		o(s)
	}
	switch {
	case s.lease == NoPermitLease:
		s.lease = foreverLease
	case s.lease != 0 && (s.lease < time.Millisecond || s.lease > MaxLease):
		return nil, fmt.Errorf("%w: permit lease %v is outside [1ms, %v] (or NoPermitLease)", ErrInvalidOption, s.lease, MaxLease)
	}
	s.h = handle{c: c, name: name, kind: psemKind{s: s, lease: s.lease}, cfg: lockConfig{lease: s.lease, hasLease: s.lease != 0}, acqKey: permitKey{c, name}}
	return s, nil
}

// Name returns the semaphore's name, which is also its Redis key.
func (s *PermitSemaphore) Name() string { return s.name }

func (s *PermitSemaphore) check(ctx context.Context) error {
	if s == nil {
		return syncCheck(nil, ctx, "PermitSemaphore")
	}
	return syncCheck(s.c, ctx, "PermitSemaphore")
}

func (s *PermitSemaphore) keys() []string { return []string{s.name, s.timeouts, s.channel} }

// leaseOf is the lease a permit is taken or renewed with: the fixed one,
// or the watchdog timeout.
func (s *PermitSemaphore) leaseOf(fixed time.Duration) time.Duration {
	if fixed > 0 {
		return fixed
	}
	return s.c.cfg.watchdogTimeout
}

// TrySetPermits sets the number of available permits to n (n >= 0) if the
// semaphore has not been set yet, and wakes waiters. It reports whether it
// set them.
func (s *PermitSemaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	return trySetPermits(ctx, s.c, s.name, s.channel, n)
}

// SetPermits makes the semaphore's total, the permits available plus those
// held, n (n >= 0), and wakes waiters. Held permits stay held: when the
// total shrinks below them, the available count goes negative until
// enough are released. With WithReplicaSync, a total that too few replicas
// acknowledged in time stays set, and the error wraps ErrNotReplicated.
func (s *PermitSemaphore) SetPermits(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: semaphore %q: %d permits: the count must not be negative", ErrInvalidOption, s.name, n)
	}
	cmd, short := runWrite(ctx, s.c, scripts.PsemSet, s.keys(), nowMillis(time.Now()), s.c.publish, n)
	switch {
	case cmd.Err() != nil:
		return fmt.Errorf("dlock: semaphore %q: set permits: %w", s.name, cmd.Err())
	case short != nil:
		return notReplicated(fmt.Sprintf("semaphore %q: set permits", s.name), short)
	}
	return nil
}

// AddPermits adds delta permits to the available ones (negative: removes
// them), creating the semaphore if needed, and wakes waiters when delta is
// positive. A delta of 0 does nothing. With WithReplicaSync, permits added
// that too few replicas acknowledged in time stay added, and the error
// wraps ErrNotReplicated.
func (s *PermitSemaphore) AddPermits(ctx context.Context, delta int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if delta == 0 {
		return nil
	}
	cmd, short := runWrite(ctx, s.c, scripts.PsemAdd, s.keys(), nowMillis(time.Now()), s.c.publish, delta)
	switch {
	case cmd.Err() != nil:
		return fmt.Errorf("dlock: semaphore %q: add %d permits: %w", s.name, delta, cmd.Err())
	case short != nil:
		return notReplicated(fmt.Sprintf("semaphore %q: add %d permits", s.name, delta), short)
	}
	return nil
}

// Acquire takes one permit, waiting as long as ctx allows; a ctx deadline
// is the longest wait. It returns the permit context: pass it to Release
// and UpdateLease, and down the call chain. The permit context carries
// ctx's values but not its cancellation: it ends with Release (cause
// ErrUnlocked), and it is cancelled with cause ErrLockLost if the permit
// expires or is taken back first. When ctx ends first the error wraps
// ErrNotObtained and ctx.Err().
//
// Waiting is push: the waiter subscribes to the semaphore's channel and
// tries again on each message, when the earliest held permit expires, and
// at least every second, so a lost message costs a second, never a hang.
// Waiters of one Client queue: a Release of this Client hands its permit
// to the longest waiter (see Release), and an Acquire that finds waiters
// of its Client queued joins them without an attempt.
// An attempt whose reply was lost, or came after the lease it set, gives
// its permit back in the background, as a Lock does: each attempt's
// permit id is made here, so it can be. While Redis cannot be reached (the Client's
// reach gate is shut) Acquire waits for it as Lock does, as long as ctx
// allows; while it does not answer (a timeout during a failover or a
// restart) Acquire goes on trying for up to 30s before it returns the
// error. With WithReplicaSync, a permit that too few replicas acknowledged
// in time is given back and Acquire fails with an error wrapping
// ErrNotReplicated, as a Lock does: a failover could grant it twice.
func (s *PermitSemaphore) Acquire(ctx context.Context) (context.Context, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	w, err := s.h.waiter(ctx, false)
	if err != nil {
		return nil, err
	}
	return w.result(acquire(ctx, w, false))
}

// AcquireWithLease is Acquire with a lease for this permit alone, as
// Redisson's acquire(leaseTime, unit): lease > 0 (at most MaxLease) is a
// fixed lease, not renewed; 0 the watchdog lease, renewed; NoPermitLease
// none. The semaphore's own lease (WithPermitLease) is not used.
func (s *PermitSemaphore) AcquireWithLease(ctx context.Context, lease time.Duration) (context.Context, error) {
	return s.acquireWithLease(ctx, lease, false)
}

// TryAcquireWithLease is TryAcquire with a lease for this permit alone, as
// AcquireWithLease.
func (s *PermitSemaphore) TryAcquireWithLease(ctx context.Context, lease time.Duration) (context.Context, error) {
	return s.acquireWithLease(ctx, lease, true)
}

func (s *PermitSemaphore) acquireWithLease(ctx context.Context, lease time.Duration, try bool) (context.Context, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	switch {
	case lease == NoPermitLease:
		lease = foreverLease
	case lease < 0 || lease > MaxLease || lease > 0 && lease < time.Millisecond:
		return nil, fmt.Errorf("%w: permit lease %v is outside [1ms, %v] (or 0 for the watchdog, NoPermitLease for none)", ErrInvalidOption, lease, MaxLease)
	}
	// A handle of this call's own: the engine takes the lease from its
	// config, the kind keeps the permit with it. The queue, the channel
	// and the context key are the semaphore's.
	h := s.h
	h.kind = psemKind{s: s, lease: lease}
	h.cfg = lockConfig{lease: lease, hasLease: lease != 0}
	w, err := h.waiter(ctx, try)
	if err != nil {
		return nil, err
	}
	return w.result(acquire(ctx, w, try))
}

// TryAcquire takes one permit if one is available now, without waiting;
// otherwise the error wraps ErrNotObtained. It is otherwise like Acquire.
func (s *PermitSemaphore) TryAcquire(ctx context.Context) (context.Context, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	w, err := s.h.waiter(ctx, true)
	if err != nil {
		return nil, err
	}
	return w.result(acquire(ctx, w, true))
}

// psemKind is a PermitSemaphore's permit as a kind of the engine: its
// scripts (psem_acquire.lua, psem_release.lua), its reply rules and its
// channel. Each acquisition has an owner of its own, the permit's id,
// which the engine passes to the scripts, so that a permit an attempt may
// have taken is given back by the engine as a lock's hold is (a failed or
// late reply, replica sync short); the permit itself is kept by the
// Client's permitSet and lease keeper (keep), not the hold registry.
type psemKind struct {
	s *PermitSemaphore
	// lease is the fixed lease of the permits this kind takes (keep): 0
	// when the watchdog renews them, foreverLease when they have none.
	lease time.Duration
}

func (k psemKind) key() string               { return k.s.name }
func (k psemKind) lockName() string          { return k.s.name }
func (k psemKind) field(owner string) string { return owner }
func (k psemKind) role() string              { return "permit" }
func (k psemKind) channel(string) string     { return k.s.channel }
func (k psemKind) label() string             { return KindPermit }

// renewer is not asked for: permits are not holds of the registry, and
// each renews itself as a leased entry (renew.go).
func (k psemKind) renewer() renewer { return nil }

// patience: a permit attempt is safe to repeat (each has its own id and
// gives it back), so a waiting Acquire outlasts a failover or a restart.
func (k psemKind) patience() time.Duration { return outageBudget }

// newOwner makes a permit id: 16 random bytes, as Redisson's.
func (k psemKind) newOwner() (string, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("dlock: semaphore %q: permit id: %w", k.s.name, err)
	}
	return string(raw[:]), nil
}

// attempt takes the permit r.owner with lease r.lease. When none is free
// the result's ttl is how long until the earliest held permit expires,
// bounded by syncPoll (no message comes when a permit expires).
func (k psemKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	s := k.s
	cmd, _ := s.c.drv.Run(ctx, r.check, scripts.PsemAcquire.Script, s.keys(), nowMillis(time.Now()), s.c.publish, leaseArg(r.lease), r.owner, noExpiryScore)
	return permitReply(cmd.Text())
}

// permitReply reads the reply of psem_acquire.lua: "OK" when taken ("OK+"
// when more permits are available), else
// ":<ms>", how long until the earliest held permit expires on the server's
// clock, or nil when none expires.
func permitReply(res string, err error) (attemptResult, error) {
	ttl := syncPoll
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return attemptResult{}, err
	case res == "OK", res == "OK+":
		return attemptResult{acquired: true, more: res == "OK+"}, nil
	case strings.HasPrefix(res, ":"):
		if ms, err := strconv.ParseInt(res[1:], 10, 64); err == nil {
			ttl = min(max(time.Duration(ms)*time.Millisecond, time.Millisecond), syncPoll)
		}
	}
	return attemptResult{ttl: ttl, reason: errNoPermit}, nil
}

// release gives back the permit r.owner (the engine's give-back).
func (k psemKind) release(ctx context.Context, r request) (releaseResult, error) {
	res, _, err := k.releaseID(ctx, r.owner, nil)
	return res, err
}

// releaseID gives back the permit id, followed by chk's replica sync when
// chk is set; expired reports that the permit had expired (on the
// server's clock) but was not reclaimed yet: it went back to the pool all
// the same. A 0 (not held) to a command the Redis client sent twice
// answers the repeat: the first run released it.
func (k psemKind) releaseID(ctx context.Context, id string, chk *transport.Check) (res releaseResult, expired bool, err error) {
	s := k.s
	cmd, resent := s.c.drv.Run(ctx, chk, scripts.PsemRelease.Script, s.keys(), nowMillis(time.Now()), s.c.publish, id)
	n, err := cmd.Int()
	switch {
	case err != nil:
		return 0, false, err
	case n == 0 && !resent:
		return notHeld, false, nil
	}
	return released, n == 2, nil
}

// countedWakes: a message on a semaphore's channel is how many permits
// are available, so it wakes that many of a Client's waiters.
func (k psemKind) countedWakes() {}

// releaseTo gives back the permit r.owner and hands it, as the permit
// next.owner with next.lease, to a waiter of this Client when allows
// (psem_release_to.lua; handoff.go). res is notHeld when r.owner was not
// held (a 0 to a command sent twice answers the repeat: released).
func (k psemKind) releaseTo(ctx context.Context, r, next request, when string, ours int) (handoff, error) {
	ho, _, err := k.releaseToExpired(ctx, r, next, when, ours)
	return ho, err
}

// releaseToExpired is releaseTo that also reports whether the permit
// given back had expired, not yet reclaimed (see releaseID).
func (k psemKind) releaseToExpired(ctx context.Context, r, next request, when string, ours int) (_ handoff, expired bool, _ error) {
	s := k.s
	cmd, resent := s.c.drv.Run(ctx, nil, scripts.PsemReleaseTo.Script, s.keys(), nowMillis(time.Now()), s.c.publish, r.owner,
		next.owner, leaseArg(next.lease), when, ours)
	v, err := cmd.Int64Slice()
	switch {
	case err != nil:
		return handoff{}, false, err
	case len(v) != 2:
		return handoff{}, false, fmt.Errorf("dlock: semaphore %q: unexpected release reply %v", s.name, v)
	case v[0] == 2:
		return handoff{res: released, handed: true}, v[1] == 1, nil
	case v[0] == 1:
		return handoff{res: released, freed: true}, v[1] == 1, nil
	case resent:
		return handoff{res: released}, false, nil
	}
	return handoff{res: notHeld}, false, nil
}

// forceRelease is not asked for: a PermitSemaphore has no ForceUnlock
// (ReleaseID gives back one permit, Delete them all).
func (k psemKind) forceRelease(context.Context) (bool, error) {
	return false, fmt.Errorf("%w: semaphore %q: a permit has no force release; use ReleaseID", ErrInvalidOption, k.s.name)
}

// keep registers a permit taken by a request sent at start with the
// Client's permits and lease keeper, and returns its permit context.
func (k psemKind) keep(ctx context.Context, r request, start time.Time) (context.Context, error) {
	return k.s.c.permits.add(ctx, k.s, r.owner, k.lease, start)
}

// outageBudget is how long a waiting Acquire goes on trying while Redis
// does not answer (a failover, a restart) before it returns the error.
const outageBudget = 30 * time.Second

// errNoPermit says why TryAcquire got nothing.
var errNoPermit = errors.New("no permit available")

// permitFrom returns the permit of this semaphore that permitCtx carries.
func (s *PermitSemaphore) permitFrom(permitCtx context.Context) (*permit, error) {
	p, ok := permitCtx.Value(permitKey{s.c, s.name}).(*permit)
	if !ok {
		return nil, fmt.Errorf("%w: semaphore %q: the context carries no permit of this semaphore; pass the context Acquire returned", ErrNotHeld, s.name)
	}
	return p, nil
}

// Release gives back the permit that permitCtx holds (a context returned
// by Acquire or TryAcquire on this semaphore, or derived from one) and
// wakes waiters; permitCtx ends with cause ErrUnlocked. When waiters of
// this Client wait, the permit goes straight to the one that waited
// longest, with no message (at most 8 times in a row
// while another process waits too; then the permit is freed and
// published). The error wraps
// ErrNotHeld when permitCtx carries no permit of this semaphore, when the
// permit was already released, or when Redis no longer has it (it expired
// and was reclaimed). A permit that expired but was not reclaimed yet goes
// back to the pool, and the error wraps ErrNotHeld all the same, as Java's
// release throws: its holder ran past its lease, and must know. After an
// error that is not
// ErrNotHeld, Release may be called again; it then reports ErrNotHeld if
// the first call did reach Redis. With WithReplicaSync, a release too few
// replicas acknowledged in time stands on the master (the permit is
// released and permitCtx ends) and the error wraps ErrNotReplicated.
func (s *PermitSemaphore) Release(permitCtx context.Context) (err error) {
	if err := s.check(permitCtx); err != nil {
		return err
	}
	p, err := s.permitFrom(permitCtx)
	if err != nil {
		return err
	}
	if !p.startRelease() {
		return fmt.Errorf("%w: semaphore %q: this permit was already released", ErrNotHeld, s.name)
	}
	defer s.c.observeRelease(permitCtx, LockInfo{Name: s.name, Kind: KindPermit}, p, &err)
	// The permit context may be cancelled already (lost permit); the
	// release still has to reach Redis, which may have the permit yet.
	res, expired, short, err := s.release(context.WithoutCancel(permitCtx), p.id)
	switch {
	case err != nil:
		p.abortRelease()
		return fmt.Errorf("dlock: semaphore %q: release: %w", s.name, err)
	case res == notHeld:
		p.drop(fmt.Errorf("%w: semaphore %q: permit not held at release", ErrLockLost, s.name))
		return fmt.Errorf("%w: semaphore %q: the permit expired and was reclaimed", ErrNotHeld, s.name)
	case expired:
		p.drop(fmt.Errorf("%w: semaphore %q: the permit had expired at release", ErrLockLost, s.name))
		return fmt.Errorf("%w: semaphore %q: the permit had expired (it is back in the pool)", ErrNotHeld, s.name)
	}
	p.drop(ErrUnlocked)
	if short != nil {
		return notReplicated(fmt.Sprintf("semaphore %q: release", s.name), short)
	}
	return nil
}

// release sends the release of permit id (the kind's script, read as the
// engine reads it: a "not held" to a command sent twice is released)
// behind the reach gate, with WithReplicaSync's check; short is that
// check's outcome.
func (s *PermitSemaphore) release(ctx context.Context, id string) (res releaseResult, expired bool, short, err error) {
	gate := s.c.drv.Gate()
	if err := gate.Err(); err != nil {
		return 0, false, nil, err
	}
	if s.c.drv.Synced() {
		chk := new(transport.Check)
		res, expired, err = psemKind{s: s}.releaseID(ctx, id, chk)
		return res, expired, chk.Failed(), gate.Saw(err)
	}
	res, expired, err = s.handOver(ctx, id)
	return res, expired, nil, gate.Saw(err)
}

// permitHandoffBound is how many times in a row a Client hands a permit
// to its own waiters while another process waits for one too. Higher than
// a lock's (handoffBound): a semaphore has several permits, and each
// release that frees one wakes a waiter in every Client, of which one at
// most gets it. While a Client's own waiters keep waiting and another
// process waits too, it frees at least every (permitHandoffBound+1)-th
// permit it releases; the count starts again when no waiter of it is left
// (its queue is dropped), so that is a bound per stretch of waiting, not
// a rate over all its releases.
const permitHandoffBound = 8

// handOver gives back permit id and hands it to the first waiter of this
// Client for a permit of s, if one waits (handoff.go): the waiter gets it
// with this round trip, no other waiter is woken for a permit it cannot
// have, and the permit is never free in between for other processes to
// race for. So that they are not starved, it is handed over at most
// handoffBound times in a row while another process waits; the next
// release frees it and publishes. Not with WithReplicaSync: a hand-over
// would skip the replica sync of the waiter's acquisition.
func (s *PermitSemaphore) handOver(ctx context.Context, id string) (_ releaseResult, expired bool, _ error) {
	k, qk := psemKind{s: s}, s.h.queueKey()
	next, when := s.c.queues.nextWithin(qk, permitHandoffBound)
	if next == nil {
		return k.releaseID(ctx, id, nil)
	}
	start := time.Now()
	ho, expired, err := k.releaseToExpired(ctx, request{owner: id}, next.req, when, 1) // the waiter subscribed this Client
	s.c.queues.handedOver(qk, next, grant{ok: err == nil && ho.handed, freed: err == nil && ho.freed, unknown: err != nil, start: start})
	return ho.res, expired, err
}

// UpdateLease sets the lease of the permit permitCtx holds: with lease > 0
// it expires lease from now and is no longer renewed; with lease 0 the
// watchdog renews it from now on; with NoPermitLease it never expires (as
// Redisson's updateLeaseTime with -1). The error wraps ErrNotHeld (and
// permitCtx is cancelled with cause ErrLockLost) when Redis no longer has
// the permit.
func (s *PermitSemaphore) UpdateLease(permitCtx context.Context, lease time.Duration) error {
	if err := s.check(permitCtx); err != nil {
		return err
	}
	switch {
	case lease == NoPermitLease:
		lease = foreverLease
	case lease < 0 || lease > MaxLease || lease > 0 && lease < time.Millisecond:
		return fmt.Errorf("%w: permit lease %v is outside [1ms, %v] (or 0 for the watchdog, NoPermitLease for none)", ErrInvalidOption, lease, MaxLease)
	}
	p, err := s.permitFrom(permitCtx)
	if err != nil {
		return err
	}
	if p.isReleased() {
		return fmt.Errorf("%w: semaphore %q: this permit was already released", ErrNotHeld, s.name)
	}
	// Not while a renewal of this permit runs: it would set the watchdog
	// lease over this one.
	p.lease.Lock()
	defer p.lease.Unlock()
	d := s.leaseOf(lease)
	start := time.Now()
	held, err := runScript(context.WithoutCancel(permitCtx), s.c, scripts.PsemLease, s.keys(), nowMillis(start), s.c.publish, leaseArg(d), p.id).Int64Slice()
	if err != nil {
		return fmt.Errorf("dlock: semaphore %q: update lease: %w", s.name, err)
	}
	if len(held) != 1 || held[0] != 1 {
		p.drop(fmt.Errorf("%w: semaphore %q: permit not held at lease update", ErrLockLost, s.name))
		return fmt.Errorf("%w: semaphore %q: the permit expired and was reclaimed", ErrNotHeld, s.name)
	}
	p.relet(lease == 0, start.Add(d))
	return nil
}

// UpdateLeaseByID sets the lease of the permit with the given id (32 hex
// digits, as PermitID and Redisson show it), whoever holds it, as
// Redisson's updateLeaseTime(id, lease): with lease > 0 (at most MaxLease)
// it expires lease from now, on the server's clock; with NoPermitLease it
// never expires. Lease 0 (the watchdog's) is refused: no watchdog keeps a
// permit by its id alone. The error wraps ErrNotHeld when no such permit is
// held (expired permits are reclaimed first), where Java returns false.
//
// It is meant for permits of other processes (a Java client's, a hung
// process's). A permit of this Client goes on with its own lease locally:
// its context still ends when that runs out, and the watchdog's next
// renewal sets the watchdog lease again; use UpdateLease for those.
func (s *PermitSemaphore) UpdateLeaseByID(ctx context.Context, id string, lease time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	raw, err := hex.DecodeString(id)
	if err != nil || len(raw) != 16 {
		return fmt.Errorf("%w: permit id %q is not 32 hex digits", ErrInvalidOption, id)
	}
	switch {
	case lease == NoPermitLease:
		lease = foreverLease
	case lease < time.Millisecond || lease > MaxLease:
		return fmt.Errorf("%w: permit lease %v is outside [1ms, %v] (or NoPermitLease for none)", ErrInvalidOption, lease, MaxLease)
	}
	held, err := runScript(ctx, s.c, scripts.PsemLease, s.keys(), nowMillis(time.Now()), s.c.publish, leaseArg(lease), string(raw)).Int64Slice()
	switch {
	case err != nil:
		return fmt.Errorf("dlock: semaphore %q: update lease of %s: %w", s.name, id, err)
	case len(held) != 1 || held[0] != 1:
		return fmt.Errorf("%w: semaphore %q: no permit %s", ErrNotHeld, s.name, id)
	}
	return nil
}

// PermitID returns the id of the permit permitCtx holds, as Redisson shows
// permit ids: 32 lowercase hex digits. ok is false when permitCtx carries
// no permit of this semaphore.
func (s *PermitSemaphore) PermitID(permitCtx context.Context) (id string, ok bool) {
	if s == nil || permitCtx == nil {
		return "", false
	}
	p, err := s.permitFrom(permitCtx)
	if err != nil {
		return "", false
	}
	return hex.EncodeToString([]byte(p.id)), true
}

// ReleaseID gives back the permit with the given id (32 hex digits, as
// PermitID and Redisson show it), whoever holds it: a permit of a process
// that hung, or one a Java client took. Its holder finds out at its
// watchdog's next visit or Release. The error wraps ErrNotHeld when no such permit is
// held, and when it had expired (not yet reclaimed: it goes back to the
// pool all the same, as Java's release(id), which throws). With
// WithReplicaSync, as Release.
func (s *PermitSemaphore) ReleaseID(ctx context.Context, id string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	raw, err := hex.DecodeString(id)
	if err != nil || len(raw) != 16 {
		return fmt.Errorf("%w: permit id %q is not 32 hex digits", ErrInvalidOption, id)
	}
	res, expired, short, err := s.release(context.WithoutCancel(ctx), string(raw))
	switch {
	case err != nil:
		return fmt.Errorf("dlock: semaphore %q: release %s: %w", s.name, id, err)
	case res == notHeld:
		return fmt.Errorf("%w: semaphore %q: no permit %s", ErrNotHeld, s.name, id)
	case expired:
		return fmt.Errorf("%w: semaphore %q: permit %s had expired (it is back in the pool)", ErrNotHeld, s.name, id)
	}
	if short != nil {
		return notReplicated(fmt.Sprintf("semaphore %q: release %s", s.name, id), short)
	}
	return nil
}

// LeaseTime returns how long the permit with the given id (32 hex
// digits, as PermitID shows it) has left, as Redisson's getLeaseTime: its
// expiry minus the Redis server's clock (Java: minus its own clock);
// NoPermitLease for a permit without lease. Expired permits are returned
// to the pool first, so the error wraps ErrNotHeld both for an expired
// permit and for one not held, where Java throws IllegalArgumentException.
func (s *PermitSemaphore) LeaseTime(ctx context.Context, id string) (time.Duration, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	raw, err := hex.DecodeString(id)
	if err != nil || len(raw) != 16 {
		return 0, fmt.Errorf("%w: permit id %q is not 32 hex digits", ErrInvalidOption, id)
	}
	ms, err := runScript(ctx, s.c, scripts.PsemLeaseTime, s.keys(), nowMillis(time.Now()), s.c.publish, string(raw)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("%w: semaphore %q: no permit %s", ErrNotHeld, s.name, id)
	case err != nil:
		return 0, fmt.Errorf("dlock: semaphore %q: lease time of %s: %w", s.name, id, err)
	case ms < 0:
		return NoPermitLease, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// AvailablePermits returns the number of permits available, after
// returning expired ones to the pool: 0 for a semaphore never set.
func (s *PermitSemaphore) AvailablePermits(ctx context.Context) (int, error) {
	v, err := s.counts(ctx)
	return v[0], err
}

// AcquiredPermits returns the number of permits held, after returning
// expired ones to the pool.
func (s *PermitSemaphore) AcquiredPermits(ctx context.Context) (int, error) {
	v, err := s.counts(ctx)
	return v[1], err
}

// TotalPermits returns the semaphore's number of permits, those available
// plus those held, after returning expired ones to the pool (Redisson's
// getPermits): what SetPermits sets. It is 0 for a semaphore never set or
// deleted, even while permits are still listed as held, as in Redisson.
func (s *PermitSemaphore) TotalPermits(ctx context.Context) (int, error) {
	v, err := s.counts(ctx)
	return v[2], err
}

// counts returns {available, acquired, total} (psem_count.lua).
func (s *PermitSemaphore) counts(ctx context.Context) (v [3]int, err error) {
	if err := s.check(ctx); err != nil {
		return v, err
	}
	res, err := runScript(ctx, s.c, scripts.PsemCount, s.keys(), nowMillis(time.Now()), s.c.publish).Int64Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return v, fmt.Errorf("dlock: semaphore %q: count permits: %w", s.name, err)
	}
	return [3]int{int(res[0]), int(res[1]), int(res[2])}, nil
}

// PermitInfo describes one permit held.
type PermitInfo struct {
	// ID is the permit's id as PermitID shows it.
	ID string
	// Expires is when the permit expires, on the Redis server's clock (on
	// the Java client's when Redisson set it); zero for a permit without
	// lease.
	Expires time.Time
}

// Permits lists the permits held, earliest expiry first (expired ones that
// no script has reclaimed yet included).
func (s *PermitSemaphore) Permits(ctx context.Context) ([]PermitInfo, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	zs, err := s.c.drv.ZRangeWithScores(ctx, s.timeouts, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("dlock: semaphore %q: list permits: %w", s.name, err)
	}
	out := make([]PermitInfo, 0, len(zs))
	for _, z := range zs {
		member, _ := z.Member.(string)
		info := PermitInfo{ID: hex.EncodeToString([]byte(member))}
		if strconv.FormatFloat(z.Score, 'f', -1, 64) != noExpiryScore {
			info.Expires = time.UnixMilli(int64(z.Score))
		}
		out = append(out, info)
	}
	return out, nil
}

// Delete deletes the semaphore and its permits, as Redisson's delete does:
// without a message. Holders find out at their watchdog's next visit or
// Release. It reports whether there was anything to delete.
func (s *PermitSemaphore) Delete(ctx context.Context) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	n, err := s.c.drv.Del(ctx, s.name, s.timeouts).Result()
	if err != nil {
		return false, fmt.Errorf("dlock: semaphore %q: delete: %w", s.name, err)
	}
	return n > 0, nil
}

// permitKey finds a permit of one semaphore in a permit context.
type permitKey struct {
	c    *Client
	name string
}

// permit is one permit held by this process, kept by the Client's
// watchdog (renew.go): renewed when it has no fixed lease, checked when it
// has one, as lock holds are.
type permit struct {
	s      *PermitSemaphore
	id     string // 16 raw bytes
	cancel context.CancelCauseFunc

	// lease is held while a script sets the permit's lease in Redis: by
	// UpdateLease, and by a renewal, which passes over a permit whose
	// lease is being set rather than wait for it. A renewal must not set
	// the watchdog lease over a fixed one that UpdateLease set after the
	// tick chose which permits to renew.
	lease sync.Mutex

	mu        sync.Mutex
	watchdog  bool // renewed by the watchdog; else a fixed lease, checked
	timer     *time.Timer
	until     time.Time // the local expiry, at which timer fires
	ended     bool      // its context is cancelled
	releasing bool      // Release was called (and did not fail)
}

// startRelease marks the permit as being released; false if it already was.
func (p *permit) startRelease() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.releasing {
		return false
	}
	p.releasing = true
	return true
}

func (p *permit) abortRelease() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releasing = false
}

func (p *permit) isReleased() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.releasing
}

// drop cancels the permit context with cause and forgets the permit.
func (p *permit) drop(cause error) { p.end(cause, false) }

// expire ends the permit whose lease ran out: its timer fired.
func (p *permit) expire() { p.end(p.ranOut(), true) }

// ranOut is why a permit whose local expiry passed was lost.
func (p *permit) ranOut() error {
	return fmt.Errorf("%w: semaphore %q: the permit's lease ran out", ErrLockLost, p.s.name)
}

// end cancels the permit context with cause and forgets the permit;
// expired says that its lease ran out.
func (p *permit) end(cause error, expired bool) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = true
	expired = !p.timer.Stop() || expired // it fired: the lease ran out
	releasing := p.releasing             // Release reports its own end
	p.mu.Unlock()
	p.finish(cause, expired, releasing)
}

// finish tells observers that the permit ended (unless Release does),
// cancels its context and forgets it.
func (p *permit) finish(cause error, expired, releasing bool) {
	if !releasing {
		p.s.c.observeLoss(LockInfo{Name: p.s.name, Kind: KindPermit}, p, expired, cause)
	}
	p.cancel(cause)
	p.s.c.permits.remove(p)
}

// overdue ends the permit whose context ctx is, if its local expiry has
// passed by the Client's clock while the context stands: a process
// resumed after a pause past the lease may look at the permit context
// before the timer's goroutine runs, or while the timer's end has not
// cancelled the context yet (acquisition.overdue, for holds). The expiry
// is checked and the permit marked ended in one hold of p.mu, so that a
// renewal (extend) cannot come in between. The context is cancelled on
// the looker's goroutine; observers hear of it on a goroutine of their
// own. A permit being released is left to Release.
func (p *permit) overdue(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	if p.releasing || p.s.c.holds.now().Before(p.until) {
		p.mu.Unlock()
		return
	}
	mine := !p.ended // else the timer's end is under way
	if mine {
		p.ended = true
		p.timer.Stop()
	}
	p.mu.Unlock()
	cause := p.ranOut()
	p.cancel(cause)
	if mine {
		go p.finish(cause, true, false)
	}
}

// extend moves the permit's local expiry to at, unless it ended.
func (p *permit) extend(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.until = at
		p.timer.Reset(time.Until(at))
	}
}

// relet records a permit's new lease, which UpdateLease set: renewed by
// the watchdog or not, and expiring at until. The watchdog keeps it
// either way; its next tick renews or checks it accordingly.
func (p *permit) relet(watchdog bool, until time.Time) {
	p.mu.Lock()
	p.watchdog = watchdog
	p.mu.Unlock()
	p.extend(until)
}

// permitSet is the permits a Client holds, so that Close can end them; the
// Client's watchdog keeps their leases. The zero value is ready to use.
type permitSet struct {
	mu      sync.Mutex
	permits map[*permit]struct{}
	closed  bool // Close ended the permits; no more are taken
}

// add registers a permit of s taken at start with lease fixed (0: the
// watchdog's) with the Client's watchdog and returns its context, derived
// from ctx's values.
func (ps *permitSet) add(ctx context.Context, s *PermitSemaphore, id string, fixed time.Duration, start time.Time) (context.Context, error) {
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	p := &permit{s: s, id: id, cancel: cancel, watchdog: fixed == 0}
	lease := s.leaseOf(fixed)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	p.mu.Lock() // the timer may fire at once: p.end must find it set
	p.until = start.Add(lease)
	p.timer = time.AfterFunc(time.Until(p.until), p.expire)
	p.mu.Unlock()
	if ps.permits == nil {
		ps.permits = map[*permit]struct{}{}
	}
	ps.permits[p] = struct{}{}
	// Refused only while Close runs, which ends p with the others.
	s.c.watchdog.Add(p)
	return permitContext{context.WithValue(pctx, permitKey{s.c, s.name}, p), p}, nil
}

// permitContext is a permit's context: every look at its state expires
// the permit first if its local expiry has passed (permit.overdue).
type permitContext struct {
	context.Context
	p *permit
}

func (c permitContext) Done() <-chan struct{} {
	c.p.overdue(c.Context)
	return c.Context.Done()
}

func (c permitContext) Err() error {
	c.p.overdue(c.Context)
	return c.Context.Err()
}

// Value answers as the context under it; a key of type *int is package
// context asking for the cancellation (context.Cause, a derived context).
func (c permitContext) Value(key any) any {
	if _, ok := key.(*int); ok {
		c.p.overdue(c.Context)
	}
	return c.Context.Value(key)
}

// remove forgets a permit that ended, here and in the watchdog.
func (ps *permitSet) remove(p *permit) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.permits, p)
	p.s.c.watchdog.Remove(p)
}

// close is called by Client.Close, once the watchdog has stopped: every
// permit context is cancelled with cause ErrClosed, and no permit is
// taken afterwards.
func (ps *permitSet) close() {
	ps.mu.Lock()
	ps.closed = true
	held := slices.Collect(maps.Keys(ps.permits))
	ps.mu.Unlock()
	for _, p := range held {
		p.drop(ErrClosed)
	}
}

// TryAcquireN takes n permits at once if n are available now, or none,
// without waiting, as Redisson's tryAcquire(n, …): the error wraps
// ErrNotObtained when fewer are available. It returns their ids (32 hex
// digits, as PermitID shows them), not permit contexts: these permits are
// not kept by the watchdog, so lease must be a fixed lease (at least 1ms,
// at most MaxLease) or NoPermitLease; 0, the watchdog lease, is refused.
// Give them back with ReleaseIDs (all at once) or ReleaseID; relet them
// with UpdateLeaseByID. n = 0 takes nothing and returns no error (Java
// does the same); n < 0 is refused. When the reply is lost (the error
// does not wrap ErrNotObtained), the permits may have been taken: they are
// given back once, at once, and otherwise expire with their lease.
func (s *PermitSemaphore) TryAcquireN(ctx context.Context, n int, lease time.Duration) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	lease, err := s.checkN(n, lease)
	if err != nil || n == 0 {
		return nil, err
	}
	ids, _, err := s.tryN(ctx, n, lease)
	if err == nil && ids == nil {
		err = fmt.Errorf("%w: semaphore %q: fewer than %d permits available", ErrNotObtained, s.name, n)
	}
	return ids, err
}

// AcquireN is TryAcquireN that waits, as long as ctx allows, until n
// permits are available at once (Redisson's acquire(n, lease)): it tries
// again at each message on the semaphore's channel, when the earliest held
// permit expires, and at least every second. When ctx ends first the
// error wraps ErrNotObtained and ctx.Err(). Errors of Redis end the wait.
func (s *PermitSemaphore) AcquireN(ctx context.Context, n int, lease time.Duration) (ids []string, err error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	lease, err = s.checkN(n, lease)
	if err != nil || n == 0 {
		return nil, err
	}
	ob := s.c.observeWait(ctx, LockInfo{Name: s.name, Kind: KindPermit}, nil, OutcomeAcquired) // nil without observers
	defer func() { ob.returned(err) }()
	err = acquire(ctx, newSyncWait(s.c, s.channel, nil, ob, func() (bool, time.Duration, error) {
		got, wait, err := s.tryN(ctx, n, lease)
		ids = got
		return got != nil, wait, err
	}), false)
	if errors.Is(err, errGaveUp) || errors.Is(err, ErrUnreachable) && ctxErr(ctx) != nil {
		return nil, fmt.Errorf("%w: semaphore %q: %d permits: %w", ErrNotObtained, s.name, n, ctxErr(ctx))
	}
	return ids, err
}

// checkN checks the count and lease of TryAcquireN and AcquireN, and
// returns the lease as the scripts take it (foreverLease for none).
func (s *PermitSemaphore) checkN(n int, lease time.Duration) (time.Duration, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: semaphore %q: %d permits: the count must not be negative", ErrInvalidOption, s.name, n)
	case lease == NoPermitLease:
		return foreverLease, nil
	case lease < time.Millisecond || lease > MaxLease:
		return 0, fmt.Errorf("%w: permit lease %v is outside [1ms, %v] (or NoPermitLease for none)", ErrInvalidOption, lease, MaxLease)
	}
	return lease, nil
}

// tryN runs psem_acquire_n.lua once, not cut short by ctx: the ids of the
// n permits taken, or nil and how long until the earliest held permit
// expires (bounded by syncPoll).
func (s *PermitSemaphore) tryN(ctx context.Context, n int, lease time.Duration) (ids []string, wait time.Duration, err error) {
	raw := make([]any, n)
	for i := range raw {
		id, err := psemKind{s: s}.newOwner()
		if err != nil {
			return nil, 0, err
		}
		raw[i] = id
	}
	args := append([]any{nowMillis(time.Now()), s.c.publish, leaseArg(lease), n}, raw...)
	cmd, short := runWrite(context.WithoutCancel(ctx), s.c, scripts.PsemAcquireN, s.keys(), args...)
	res, err := permitReply(cmd.Text())
	switch {
	case err != nil:
		s.giveBackIDs(ctx, raw)
		return nil, 0, fmt.Errorf("dlock: semaphore %q: acquire %d permits: %w", s.name, n, err)
	case !res.acquired:
		return nil, res.ttl, nil
	case short != nil:
		s.giveBackIDs(ctx, raw)
		return nil, 0, notReplicated(fmt.Sprintf("semaphore %q: acquire %d permits", s.name, n), short)
	}
	ids = make([]string, n)
	for i, id := range raw {
		ids[i] = hex.EncodeToString([]byte(id.(string)))
	}
	return ids, 0, nil
}

// giveBackIDs gives back the permits raw (ids of 16 raw bytes) that an
// attempt may have taken, once, without waiting for the caller's ctx.
func (s *PermitSemaphore) giveBackIDs(ctx context.Context, raw []any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.c.drv.Call(ctx, nil, false, scripts.PsemReleaseIDs.Script, s.keys(), append([]any{nowMillis(time.Now()), s.c.publish}, raw...)...).Err()
}

// ReleaseIDs gives back the permits with the given ids (32 hex digits
// each) all together, or none, as Redisson's release(list) (all-or-nothing
// since 3.41.0), and wakes as many waiters: if any of them is not held or
// has expired, nothing is released and the error wraps ErrNotHeld. An
// empty list or a repeated id is refused (ErrInvalidOption), as Java
// refuses an empty list. Holders of these permits in this process find out
// at their watchdog's next visit or Release. With WithReplicaSync, a
// release too few replicas acknowledged in time stands on the master and
// the error wraps ErrNotReplicated.
func (s *PermitSemaphore) ReleaseIDs(ctx context.Context, ids []string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: semaphore %q: no permit ids to release", ErrInvalidOption, s.name)
	}
	args := []any{nowMillis(time.Now()), s.c.publish}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		raw, err := hex.DecodeString(id)
		if err != nil || len(raw) != 16 {
			return fmt.Errorf("%w: permit id %q is not 32 hex digits", ErrInvalidOption, id)
		}
		if seen[string(raw)] {
			return fmt.Errorf("%w: semaphore %q: permit %s is listed twice", ErrInvalidOption, s.name, id)
		}
		seen[string(raw)] = true
		args = append(args, string(raw))
	}
	gate := s.c.drv.Gate()
	if err := gate.Err(); err != nil {
		return fmt.Errorf("dlock: semaphore %q: release %d permits: %w", s.name, len(ids), err)
	}
	var chk *transport.Check
	if s.c.drv.Synced() {
		chk = new(transport.Check)
	}
	cmd, resent := s.c.drv.Run(context.WithoutCancel(ctx), chk, scripts.PsemReleaseIDs.Script, s.keys(), args...)
	n, err := cmd.Int()
	switch {
	case gate.Saw(err) != nil:
		return fmt.Errorf("dlock: semaphore %q: release %d permits: %w", s.name, len(ids), err)
	case !resent && n == 0: // a re-sent command finds them released by the first
		return fmt.Errorf("%w: semaphore %q: not all of the %d permits are held (one is released, reclaimed or expired); none was released", ErrNotHeld, s.name, len(ids))
	case chk.Failed() != nil:
		return notReplicated(fmt.Sprintf("semaphore %q: release %d permits", s.name, len(ids)), chk.Failed())
	}
	return nil
}
