package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// Semaphore is a counting semaphore in Redis with Redisson's RSemaphore
// layout: the key name holds the number of available permits as a decimal
// integer, and every operation that adds permits publishes the new count on
// redisson_sc:{name} (SPUBLISH on a cluster with sharded pub/sub), so Go and
// Java (Redisson) processes can share one.
//
// Permits have no owner and no lease: Release may be called by anyone, and
// permits held by a process that dies are not given back. Use a
// PermitSemaphore where a crashed holder's permit must come back.
//
// A Semaphore is safe for concurrent use; its methods fail with ErrClosed
// once its Client is closed.
type Semaphore struct {
	c       *Client
	name    string
	channel string
}

// NewSemaphore returns the counting semaphore called name. It does not
// touch Redis, and does not create the semaphore: one that was never set
// up has 0 permits, so Acquire waits until ctx ends (and TryAcquire
// reports false) until some process calls TrySetPermits, AddPermits or
// Release. Set it up once, typically with TrySetPermits at startup. The
// name follows the rules of lock names (ErrInvalidName).
func (c *Client) NewSemaphore(name string) (*Semaphore, error) {
	if err := newSync(c, name); err != nil {
		return nil, err
	}
	return &Semaphore{c: c, name: name, channel: layout.Prefixed(layout.SemChannelPrefix, name)}, nil
}

// Name returns the semaphore's name, which is also its Redis key.
func (s *Semaphore) Name() string { return s.name }

func (s *Semaphore) check(ctx context.Context) error {
	if s == nil {
		return syncCheck(nil, ctx, "Semaphore")
	}
	return syncCheck(s.c, ctx, "Semaphore")
}

// checkPermits rejects a permit count that is not positive.
func checkPermits(what string, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: %s %d permits: the count must be positive", ErrInvalidOption, what, n)
	}
	return nil
}

// TrySetPermits sets the number of available permits to n if the semaphore
// has not been set yet (its key does not exist), and wakes waiters. It
// reports whether it set them. n must not be negative. With
// WithReplicaSync, a write too few replicas acknowledged in time stands:
// TrySetPermits reports what it did and an error wrapping
// ErrNotReplicated.
func (s *Semaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	return trySetPermits(ctx, s.c, s.name, s.channel, n)
}

// trySetPermits is TrySetPermits of both semaphore kinds, which share the
// key of the available count and the channel.
func trySetPermits(ctx context.Context, c *Client, name, channel string, n int) (bool, error) {
	if n < 0 {
		return false, fmt.Errorf("%w: semaphore %q: %d permits: the count must not be negative", ErrInvalidOption, name, n)
	}
	cmd, short := runWrite(ctx, c, scripts.SemTrySet, []string{name, channel}, n, c.publish)
	set, err := cmd.Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("dlock: semaphore %q: set permits: %w", name, err)
	case short != nil:
		return set == 1, notReplicated(fmt.Sprintf("semaphore %q: set permits", name), short)
	}
	return set == 1, nil
}

// AddPermits adds delta permits to the available ones (a negative delta
// removes them; the count may go below zero, and Acquire then waits until
// enough are released), creating the semaphore if needed, and wakes
// waiters. The semaphore loses any TTL its key had, as in Redisson. A
// delta of 0 does nothing: no command is sent, a missing semaphore is not
// created and a TTL stays. That differs from Redisson, whose
// addPermits(0) sets the key to its count plus 0 and publishes (creating
// a missing semaphore with 0 permits and dropping any TTL). With
// WithReplicaSync, permits added that too few
// replicas acknowledged in time stay added, and the error wraps
// ErrNotReplicated.
func (s *Semaphore) AddPermits(ctx context.Context, delta int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if delta == 0 {
		return nil
	}
	cmd, short := runWrite(ctx, s.c, scripts.SemAdd, []string{s.name, s.channel}, delta, s.c.publish)
	switch {
	case cmd.Err() != nil:
		return fmt.Errorf("dlock: semaphore %q: add %d permits: %w", s.name, delta, cmd.Err())
	case short != nil:
		return notReplicated(fmt.Sprintf("semaphore %q: add %d permits", s.name, delta), short)
	}
	return nil
}

// Acquire takes n permits, waiting as long as ctx allows for n to be
// available at once. As in Redisson, n == 0 returns at once without
// asking Redis (golang.org/x/sync/semaphore agrees), and a negative n is
// refused (ErrInvalidOption). Waiting is push: the waiter subscribes to the
// semaphore's channel and tries again on each message, and at least every
// second, so a lost message costs a second, never a hang. When ctx ends
// first the error wraps ErrNotObtained and ctx.Err(); it also says when the
// semaphore does not exist (it was never set up, see NewSemaphore), which
// Acquire checks with one more command, bounded by a second.
//
// An attempt that reached Redis is never cut short by ctx (its reply is
// awaited, bounded by the Redis client's timeouts), so that permits are
// never taken without the caller knowing; Acquire may therefore return one
// round trip after ctx ends. Only a reply lost to a broken connection or a
// timeout can leave permits taken that nobody will release: the error then
// wraps ErrNoReply (the script is not sent twice, see ErrNoReply). With
// WithReplicaSync, permits taken that too few replicas acknowledged in
// time are released again and Acquire fails with an error wrapping
// ErrNotReplicated, as a Lock does.
func (s *Semaphore) Acquire(ctx context.Context, n int) (err error) {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n == 0 {
		return nil // Redisson: nothing to take
	}
	if err := checkPermits("semaphore "+strconv.Quote(s.name)+": acquire", n); err != nil {
		return err
	}
	ob := s.c.observeWait(ctx, LockInfo{Name: s.name, Kind: KindSemaphore}, nil, OutcomeAcquired) // observe.go; nil without observers
	defer func() { ob.returned(err) }()
	err = acquire(ctx, newSyncWait(s.c, s.channel, nil, ob, func() (bool, time.Duration, error) {
		ok, err := s.try(ctx, n)
		return ok, 0, err
	}), false)
	if errors.Is(err, errGaveUp) || errors.Is(err, ErrUnreachable) && ctxErr(ctx) != nil { // ctx ended at the gate: nothing was sent
		return fmt.Errorf("%w: semaphore %q: %d permits: %w%s", ErrNotObtained, s.name, n, ctxErr(ctx), s.neverSet(ctx))
	}
	return err
}

// neverSet returns a note for Acquire's error when the semaphore's key
// does not exist, so that a newcomer who never set permits learns why
// Acquire waited; "" when it exists or that cannot be told within a
// second.
func (s *Semaphore) neverSet(ctx context.Context) string {
	if s.c.drv.Gate().Err() != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if n, err := s.c.drv.Exists(ctx, s.name).Result(); err != nil || n != 0 {
		return ""
	}
	return " (the semaphore does not exist: it was never set up with TrySetPermits or AddPermits, or was deleted)"
}

// TryAcquire takes n permits if that many are available now, and reports
// whether it did. As in Redisson, n == 0 reports true without asking
// Redis, and a negative n is refused (ErrInvalidOption). It does not wait. With WithReplicaSync it gives
// back permits too few replicas acknowledged, as Acquire does.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (ok bool, err error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if n == 0 {
		return true, nil // Redisson: nothing to take
	}
	if err := checkPermits("semaphore "+strconv.Quote(s.name)+": try acquire", n); err != nil {
		return false, err
	}
	ob := s.c.observeWait(ctx, LockInfo{Name: s.name, Kind: KindSemaphore, Try: true}, nil, OutcomeAcquired)
	defer func() { ob.tried(ok, err) }()
	return s.try(ctx, n)
}

// try runs the acquire script once, not cut short by ctx (see Acquire).
// Permits it took that too few replicas acknowledged (WithReplicaSync)
// are released again: a failover could grant them twice.
func (s *Semaphore) try(ctx context.Context, n int) (bool, error) {
	cmd, short := runWrite(context.WithoutCancel(ctx), s.c, scripts.SemAcquire, []string{s.name}, n)
	got, err := cmd.Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("dlock: semaphore %q: acquire %d permits: %w", s.name, n, err)
	case got == 1 && short != nil:
		if err := runScript(context.WithoutCancel(ctx), s.c, scripts.SemRelease, []string{s.name, s.channel}, n, s.c.publish).Err(); err != nil {
			s.c.cfg.logger.Warn("dlock: giving back permits that were not replicated failed", "semaphore", s.name, "permits", n, "error", err)
		}
		return false, fmt.Errorf("dlock: semaphore %q: acquire %d permits: given back: %w", s.name, n, short)
	}
	return got == 1, nil
}

// Release gives back n permits and wakes waiters; as in Redisson, n == 0
// does nothing and a negative n is refused (ErrInvalidOption). As in
// Redisson the count is not bounded: permits released that were not acquired add to
// the available ones, which is how a semaphore is used to signal. An error
// wrapping ErrNoReply means the release may or may not have happened; one
// wrapping ErrNotReplicated (WithReplicaSync) that it happened on the
// master but too few replicas acknowledged it in time: do not release
// again.
func (s *Semaphore) Release(ctx context.Context, n int) (err error) {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n == 0 {
		return nil // Redisson: nothing to give
	}
	if err := checkPermits("semaphore "+strconv.Quote(s.name)+": release", n); err != nil {
		return err
	}
	defer s.c.observeRelease(ctx, LockInfo{Name: s.name, Kind: KindSemaphore}, nil, &err)
	// Not cut short by ctx either: a release the caller believes failed
	// must not have happened.
	cmd, short := runWrite(context.WithoutCancel(ctx), s.c, scripts.SemRelease, []string{s.name, s.channel}, n, s.c.publish)
	switch {
	case cmd.Err() != nil:
		return fmt.Errorf("dlock: semaphore %q: release %d permits: %w", s.name, n, cmd.Err())
	case short != nil:
		return notReplicated(fmt.Sprintf("semaphore %q: release %d permits", s.name, n), short)
	}
	return nil
}

// AvailablePermits returns the number of available permits: 0 for a
// semaphore that was never set, possibly negative after AddPermits.
func (s *Semaphore) AvailablePermits(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	n, err := s.c.drv.Get(ctx, s.name).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("dlock: semaphore %q: available permits: %w", s.name, err)
	}
	return n, nil
}

// DrainPermits takes every available permit and returns how many there
// were (0 for a semaphore that was never set).
func (s *Semaphore) DrainPermits(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	n, err := runScript(context.WithoutCancel(ctx), s.c, scripts.SemDrain, []string{s.name}).Int()
	if err != nil {
		return 0, fmt.Errorf("dlock: semaphore %q: drain permits: %w", s.name, err)
	}
	return n, nil
}

// Delete deletes the semaphore, as Redisson's delete does: without a
// message, so waiters find out at their next try. It reports whether there
// was one.
func (s *Semaphore) Delete(ctx context.Context) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	n, err := s.c.drv.Del(ctx, s.name).Result()
	if err != nil {
		return false, fmt.Errorf("dlock: semaphore %q: delete: %w", s.name, err)
	}
	return n == 1, nil
}

// TrySetPermitsWithTTL is TrySetPermits for a semaphore that Redis deletes
// ttl after it is set (Redisson's trySetPermits(permits, timeToLive),
// 3.29.0+): it sets the available permits to n and the key's time to live
// to ttl if the semaphore has not been set yet, wakes waiters, and reports
// whether it set them. n must not be negative; ttl must be at least a
// millisecond (Redis counts in milliseconds; Java's call with a zero ttl
// fails in Redis). AddPermits and DrainPermits later drop the TTL, as in
// Redisson; Release and Acquire keep it. With WithReplicaSync, a write too
// few replicas acknowledged in time stands: the call reports what it did
// and an error wrapping ErrNotReplicated.
func (s *Semaphore) TrySetPermitsWithTTL(ctx context.Context, n int, ttl time.Duration) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	switch {
	case n < 0:
		return false, fmt.Errorf("%w: semaphore %q: %d permits: the count must not be negative", ErrInvalidOption, s.name, n)
	case ttl < time.Millisecond:
		return false, fmt.Errorf("%w: semaphore %q: time to live %v: want at least 1ms", ErrInvalidOption, s.name, ttl)
	}
	cmd, short := runWrite(ctx, s.c, scripts.SemTrySetTTL, []string{s.name, s.channel}, n, s.c.publish, millis(ttl))
	set, err := cmd.Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("dlock: semaphore %q: set permits: %w", s.name, err)
	case short != nil:
		return set == 1, notReplicated(fmt.Sprintf("semaphore %q: set permits", s.name), short)
	}
	return set == 1, nil
}

// ReleaseIfExists is Release for a semaphore that exists (Redisson's
// releaseIfExists, 4.0.0+): it gives back n permits and wakes waiters if
// the semaphore's key is there, and reports whether it was; a semaphore
// that was deleted or whose TTL ran out (TrySetPermitsWithTTL, Expire) is
// not created again. As in Redisson, n == 0 reports false without asking
// Redis, and a negative n is refused (ErrInvalidOption). Errors are
// Release's.
func (s *Semaphore) ReleaseIfExists(ctx context.Context, n int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if n == 0 {
		return false, nil // Redisson: nothing released
	}
	if err := checkPermits("semaphore "+strconv.Quote(s.name)+": release", n); err != nil {
		return false, err
	}
	// Not cut short by ctx, as Release.
	cmd, short := runWrite(context.WithoutCancel(ctx), s.c, scripts.SemReleaseIfExists, []string{s.name, s.channel}, n, s.c.publish)
	got, err := cmd.Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("dlock: semaphore %q: release %d permits: %w", s.name, n, err)
	case got == 0:
		return false, nil
	case short != nil:
		err = notReplicated(fmt.Sprintf("semaphore %q: release %d permits", s.name, n), short)
	}
	s.c.observeRelease(ctx, LockInfo{Name: s.name, Kind: KindSemaphore}, nil, &err)
	return true, err
}

// Expire sets the semaphore's time to live: Redis deletes it ttl from now
// (Redisson's expire, from RExpirable). It reports whether the semaphore
// exists (nothing is set otherwise). ttl must be at least a millisecond:
// Redis would delete the key at once for less, which Delete does plainly.
// Waiters are not told when the key goes: they find it at their next try.
func (s *Semaphore) Expire(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%w: semaphore %q: time to live %v: want at least 1ms", ErrInvalidOption, s.name, ttl)
	}
	ok, err := s.c.drv.PExpire(ctx, s.name, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("dlock: semaphore %q: expire: %w", s.name, err)
	}
	return ok, nil
}

// ClearExpire removes the semaphore's time to live (Redisson's
// clearExpire), and reports whether it had one.
func (s *Semaphore) ClearExpire(ctx context.Context) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	ok, err := s.c.drv.Persist(ctx, s.name).Result()
	if err != nil {
		return false, fmt.Errorf("dlock: semaphore %q: clear expire: %w", s.name, err)
	}
	return ok, nil
}

// TTL returns how long the semaphore has left before Redis deletes it, or
// 0 when it has no time to live or does not exist, as a lock's TTL does
// (Redisson's remainTimeToLive answers -1 and -2 for those).
func (s *Semaphore) TTL(ctx context.Context) (time.Duration, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	d, err := s.c.drv.PTTL(ctx, s.name).Result()
	if err != nil {
		return 0, fmt.Errorf("dlock: semaphore %q: ttl: %w", s.name, err)
	}
	return max(d, 0), nil
}
