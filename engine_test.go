package dlock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestGiveUpDuringAttemptLeavesNothing: ctx ends while an acquire script
// is in flight (the server is busy in DEBUG SLEEP, and the client gives up
// at the deadline). The script still runs; the Lock call must not leave
// that hold behind, neither a first hold nor an extra reentrant count.
func TestGiveUpDuringAttemptLeavesNothing(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	c := newClient(t, rdb)
	name := lockName(t)
	m := mustMutex(t, c, name)

	sleep := func() { // writes (scripts too) wait 300 ms, then run
		if err := admin.Do(ctx, "CLIENT", "PAUSE", "300", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A first acquisition given up mid-flight.
	sleep()
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := m.Lock(tctx)
	cancel()
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if n, _ := admin.Exists(ctx, name).Result(); n != 0 {
		t.Fatal("a Lock that returned an error left the lock held")
	}

	// A reentrant acquisition given up mid-flight.
	l := mustLock(t, ctx, m)
	sleep()
	tctx, cancel = context.WithTimeout(l, 50*time.Millisecond)
	_, err = m.Lock(tctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reentrant Lock: %v", err)
	}
	if n, _ := m.HoldCount(l); n != 1 {
		t.Fatalf("hold count %d after a failed re-entry, want 1", n)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if n, _ := admin.Exists(ctx, name).Result(); n != 0 {
		t.Fatal("lock still held after its only Unlock")
	}
}

// TestReentryWithOtherLeaseRefused: one hash has one expiry, so a re-entry
// through a handle with another lease is refused rather than allowed to
// shorten the outer hold's lease behind its back.
func TestReentryWithOtherLeaseRefused(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	name := lockName(t)
	watched := mustMutex(t, c, name)
	leased := mustMutex(t, c, name, WithLease(300*time.Millisecond))
	l := mustLock(t, ctx, watched)
	if _, err := leased.Lock(l); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("re-entry with a fixed lease: %v, want ErrInvalidOption", err)
	}
	if n, _ := watched.HoldCount(l); n != 1 {
		t.Errorf("hold count %d, want 1", n)
	}
	if err := watched.Unlock(l); err != nil {
		t.Fatal(err)
	}
	l2 := mustLock(t, ctx, leased)
	if _, err := watched.TryLock(l2); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("re-entry without a lease into a fixed lease: %v, want ErrInvalidOption", err)
	}
	if err := leased.Unlock(l2); err != nil {
		t.Fatal(err)
	}
}

// TestUnlockIsPerHold: Unlock releases the hold its context stands for,
// and only once; a finished context or another lock's context releases
// nothing.
func TestUnlockIsPerHold(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	a := mustMutex(t, c, lockName(t))
	b := mustMutex(t, c, a.Name()+":b")
	outer := mustLock(t, ctx, a)
	inner := mustLock(t, outer, a)
	if err := a.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(inner); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock of one hold: %v, want ErrNotHeld", err)
	}
	if outer.Err() != nil {
		t.Fatal("the outer lock context ended by a repeated inner Unlock")
	}
	if n, _ := a.HoldCount(outer); n != 1 {
		t.Fatalf("hold count %d, want 1", n)
	}
	lb := mustLock(t, outer, b) // nested lock, same owner
	if err := a.Unlock(lb); err != nil {
		t.Fatalf("Unlock of a with a context nested inside it: %v", err) // lb derives from outer
	}
	if err := b.Unlock(outer); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of b with a's context: %v, want ErrNotHeld", err)
	}
	if err := b.Unlock(lb); err != nil {
		t.Fatal(err)
	}
	if isLocked(t, a) {
		t.Error("a still locked")
	}
}

// TestUnlockGoesOnAfterError: a last Unlock whose reply does not come in
// time returns the error at once, and the release goes on in the
// background until it gets through, instead of leaving the lock to expire
// with its lease; the hold is released once: a second Unlock says so.
func TestUnlockGoesOnAfterError(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	outer := mustLock(t, ctx, m)
	inner := mustLock(t, outer, m)
	if err := m.Unlock(inner); err != nil { // counted in the Client
		t.Fatal(err)
	}
	// Writes wait 300 ms: the release's reply does not come in time.
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "300", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(outer); err == nil {
		t.Fatal("Unlock succeeded although its reply timed out")
	}
	if !errors.Is(context.Cause(outer), ErrUnlocked) {
		t.Errorf("lock context cause %v, want ErrUnlocked", context.Cause(outer))
	}
	if err := m.Unlock(outer); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	eventually(t, 5*time.Second, func() error {
		n, err := admin.Exists(ctx, m.Name()).Result()
		if err == nil && n != 0 {
			err = errors.New("still locked")
		}
		return err
	})
}

// TestBadCallsReturnErrors: New refuses clients it cannot serve. (Bad
// calls on handles are the contract suite's, contract_test.go.)
func TestBadCallsReturnErrors(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr}})
	defer ring.Close()
	if _, err := New(ring); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New(ring): %v, want ErrInvalidOption", err)
	}
	var nilClient *redis.Client
	if _, err := New(nilClient); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New(typed nil): %v", err)
	}
}

// TestLateReplyIsNotAHold: the acquire script runs, but its reply comes
// back only after the lease it set has run out on the client's clock (here
// the server holds writes for 300 ms; a lease of 100 ms). Such a hold is
// worth nothing: Lock gives it back and tries again, and returns a lock
// context that is live, not one cancelled on arrival.
func TestLateReplyIsNotAHold(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	m := mustMutex(t, newClient(t, nil), lockName(t), WithLease(100*time.Millisecond))
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "300", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select { // a fresh 100 ms lease: live for a while yet
	case <-l.Done():
		t.Fatalf("Lock returned a lock context that ended at once: %v", context.Cause(l))
	case <-time.After(40 * time.Millisecond):
	}
	if n, _ := m.HoldCount(l); n != 1 {
		t.Errorf("hold count %d, want 1", n)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestAttemptOnCallersContext: on a go-redis client with
// ContextTimeoutEnabled, which ends each request by its ctx's deadline, a
// Lock with a deadline sends its attempt with the caller's ctx, on the
// caller's goroutine, rather than handing it to a goroutine of its own
// under a cleanup deadline (which costs two thread wake-ups). honoursDeadlines
// says which clients qualify.
func TestAttemptOnCallersContext(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	name := lockName(t)
	seen := make(chan time.Time, 16)
	rdb.AddHook(deadlineHook(func(cmd redis.Cmder, d time.Time) {
		if slices.Contains(cmd.Args(), any(name)) {
			seen <- d
		}
	}))
	m := mustMutex(t, newClient(t, rdb), name)
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	want, _ := dctx.Deadline()
	l, err := m.Lock(dctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, seen, 10*time.Second, "the attempt's deadline"); !got.Equal(want) {
		t.Errorf("the attempt's ctx has deadline %v, want the caller's %v", got, want)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
		want bool
	}{
		{"default options", redis.NewClient(&redis.Options{Addr: redisAddr}), false},
		{"ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true}), true},
		{"no socket deadlines", redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"failover", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{redisAddr}, ContextTimeoutEnabled: true}), false},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redisAddr}, ContextTimeoutEnabled: true}), false},
	} {
		if got := honoursDeadlines(c.rdb); got != c.want {
			t.Errorf("%s: honoursDeadlines = %v, want %v", c.name, got, c.want)
		}
		_ = c.rdb.Close()
	}
}

// deadlineHook reports each command whose ctx has a deadline.
type deadlineHook func(redis.Cmder, time.Time)

func (deadlineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f deadlineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d, ok := ctx.Deadline(); ok {
			f(cmd, d)
		}
		return next(ctx, cmd)
	}
}

func (deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
