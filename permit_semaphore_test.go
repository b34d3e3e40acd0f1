package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

func mustPermitSemaphore(t testing.TB, c *Client, name string, opts ...PermitOption) *PermitSemaphore {
	t.Helper()
	s, err := c.NewPermitSemaphore(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantAvailable(t testing.TB, s *PermitSemaphore, available, acquired int) {
	t.Helper()
	ctx := context.Background()
	a, err := s.AvailablePermits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.AcquiredPermits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a != available || b != acquired {
		t.Fatalf("available %d, acquired %d; want %d, %d", a, b, available, acquired)
	}
}

// eventuallyAvailable is wantAvailable for counts that background work
// (a give-back) reaches: it waits for them, 10s at most.
func eventuallyAvailable(t testing.TB, s *PermitSemaphore, available, acquired int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		a, err := s.AvailablePermits(context.Background())
		if err != nil {
			return err
		}
		b, err := s.AcquiredPermits(context.Background())
		if err != nil {
			return err
		}
		if a != available || b != acquired {
			return fmt.Errorf("available %d, acquired %d; want %d, %d", a, b, available, acquired)
		}
		return nil
	})
}

// wantEnded waits (10s at most) for a permit context to end with cause.
func wantEnded(t testing.TB, pctx context.Context, cause error) {
	t.Helper()
	select {
	case <-pctx.Done():
		if !errors.Is(context.Cause(pctx), cause) {
			t.Fatalf("permit context ended with %v, want %v", context.Cause(pctx), cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("permit context not ended (want %v)", cause)
	}
}

func TestPermitSemaphoreOperations(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	rdb := newRedis(t)
	s := mustPermitSemaphore(t, newClient(t, nil), name)

	wantAvailable(t, s, 0, 0)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire on an unset semaphore: %v", err)
	}
	if ok, err := s.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	if ok, err := s.TrySetPermits(ctx, 2); ok || err != nil {
		t.Fatalf("second TrySetPermits: %v %v", ok, err)
	}
	p1, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 0, 2)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire with none left: %v", err)
	}

	// Redisson's layout: the member is the 16 raw bytes of the id, the
	// score an integer expiry in ms about a watchdog timeout ahead.
	id, ok := s.PermitID(p1)
	if !ok || len(id) != 32 {
		t.Fatalf("PermitID: %q %v", id, ok)
	}
	members, err := rdb.ZRangeWithScores(ctx, "{"+name+"}:timeout", 0, -1).Result()
	if err != nil || len(members) != 2 {
		t.Fatalf("timeout zset: %v %v", members, err)
	}
	for _, m := range members {
		if len(m.Member.(string)) != 16 {
			t.Errorf("zset member %q is not 16 raw bytes", m.Member)
		}
		left := time.Until(time.UnixMilli(int64(m.Score)))
		if m.Score != float64(int64(m.Score)) || left <= 0 || left > DefaultWatchdogTimeout {
			t.Errorf("score %v: %v left, want within the watchdog timeout", m.Score, left)
		}
	}
	infos, err := s.Permits(ctx)
	if err != nil || len(infos) != 2 || (infos[0].ID != id && infos[1].ID != id) {
		t.Fatalf("Permits: %+v %v (want %s among them)", infos, err, id)
	}

	if err := s.Release(p1); err != nil {
		t.Fatal(err)
	}
	wantEnded(t, p1, ErrUnlocked)
	if err := s.Release(p1); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	wantAvailable(t, s, 1, 1)
	if err := s.SetPermits(ctx, 5); err != nil { // total 5: 4 available, 1 held
		t.Fatal(err)
	}
	wantAvailable(t, s, 4, 1)
	if err := s.AddPermits(ctx, -2); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 2, 1)
	if err := s.UpdateLease(p2, time.Hour); err != nil {
		t.Fatal(err)
	}
	if score, _ := rdb.ZScore(ctx, "{"+name+"}:timeout", members[0].Member.(string)).Result(); score != 0 {
		if left := time.Until(time.UnixMilli(int64(score))); left < 59*time.Minute {
			t.Errorf("after UpdateLease(1h), %v left", left)
		}
	}
	if ok, err := s.Delete(ctx); !ok || err != nil {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	// The holder finds out at its Release.
	if err := s.Release(p2); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release after Delete: %v", err)
	}
	wantEnded(t, p2, ErrLockLost)
}

func TestPermitSemaphoreBadInput(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	c := newClient(t, nil)
	name := lockName(t)
	s := mustPermitSemaphore(t, c, name)
	other := mustPermitSemaphore(t, c, name+":other")
	for _, d := range []time.Duration{-time.Second, time.Microsecond, MaxLease + 1} {
		if _, err := c.NewPermitSemaphore(name, WithPermitLease(d)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithPermitLease(%v): %v", d, err)
		}
	}
	if _, err := s.TrySetPermits(ctx, -1); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("TrySetPermits(-1): %v", err)
	}
	if err := s.SetPermits(ctx, -1); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SetPermits(-1): %v", err)
	}
	if err := s.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of a context without permit: %v", err)
	}
	if _, err := other.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	op, err := other.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(op); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of another semaphore's permit: %v", err)
	}
	if err := other.UpdateLease(op, -time.Second); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("UpdateLease(-1s): %v", err)
	}
	for _, id := range []string{"", "xyz", "00ff"} {
		if err := s.ReleaseID(ctx, id); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("ReleaseID(%q): %v", id, err)
		}
	}
	if err := s.ReleaseID(ctx, "00112233445566778899aabbccddeeff"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ReleaseID of no permit: %v", err)
	}
	if _, ok := s.PermitID(ctx); ok {
		t.Error("PermitID of a context without permit")
	}
	if err := other.Release(op); err != nil {
		t.Fatal(err)
	}
	var zero *PermitSemaphore
	if _, err := zero.Acquire(ctx); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Acquire on a nil PermitSemaphore: %v", err)
	}
	if _, err := c.NewPermitSemaphore("a}b"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("NewPermitSemaphore(a}b): %v", err)
	}
	_, _ = other.Delete(ctx)
}

// TestPermitSemaphoreFixedLease: a permit with a fixed lease ends when it
// runs out, another holder gets it back, and the late Release says so.
//
// The waiter wakes at the permit's expiry, which the acquire script tells
// it, not at a message (an expiry publishes nothing) nor at its poll. It is
// timed from its try once subscribed (a hook on its Redis client sees its
// tries), which must come before the expiry (the lease, 500 ms, leaves a
// loaded machine room for the subscription): a poll comes more than
// syncPoll after that try; the expiry, told to it, less than the lease
// after it, which leaves the wake-up 300 ms of scheduling delay below
// wakeBound.
func TestPermitSemaphoreFixedLease(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const lease = 500 * time.Millisecond
	short := mustPermitSemaphore(t, newClient(t, nil), name, WithPermitLease(lease))
	rdb, probe := probeScripts(t, name)
	s := mustPermitSemaphore(t, newClient(t, rdb), name)
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	taken := time.Now() // the permit's expiry is lease after a later instant
	p, err := short.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   context.Context
		err error
	}
	probe.drain()
	got := make(chan result, 1)
	go func() {
		p, err := s.Acquire(ctx)
		got <- result{p, err}
	}()
	recv(t, probe.replies, 10*time.Second, "the waiter's first try")
	slept := recv(t, probe.replies, 10*time.Second, "the waiter's try once subscribed")
	r := recv(t, got, 10*time.Second, "the waiter's Acquire")
	if r.err != nil {
		t.Fatalf("waiter for a permit with a %v lease: %v", lease, r.err)
	}
	d := time.Since(slept)
	// The try sent its clock before its reply came: one a few ms before
	// the expiry found the permit held.
	if e := slept.Sub(taken); e >= lease-10*time.Millisecond {
		t.Fatalf("the waiter's try once subscribed replied %v after the permit was taken, not before its %v lease ran out: that try may have taken the expired permit, and the test cannot tell how the waiter was woken (the machine is too slow for it)", e, lease)
	}
	t.Logf("waiter took the expired permit %v after its try once subscribed, %v after the permit was taken with a %v lease", d, time.Since(taken), lease)
	if d >= wakeBound {
		t.Errorf("waiter took the permit %v after its try once subscribed (the permit's %v lease ran out meanwhile): woken by its %v poll, not at the expiry the script told it", d, lease, syncPoll)
	}
	wantEnded(t, p, ErrLockLost)
	if err := short.Release(p); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release of a reclaimed permit: %v", err)
	}
	if err := s.Release(r.p); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreWatchdog: a permit without fixed lease outlives its
// lease while its Client runs (renewed), and comes back to the pool one
// lease after its Client dies; Close cancels it with ErrClosed.
func TestPermitSemaphoreWatchdog(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const lease = 600 * time.Millisecond
	holder := newClient(t, nil, WithWatchdogTimeout(lease))
	hs := mustPermitSemaphore(t, holder, name)
	s := mustPermitSemaphore(t, newClient(t, nil), name)
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := hs.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Three leases pass: the permit is still held.
	select {
	case <-p.Done():
		t.Fatalf("permit lost while renewed: %v", context.Cause(p))
	case <-time.After(3 * lease):
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire while the renewed permit is held: %v", err)
	}
	if err := holder.Close(); err != nil { // the holder "dies"
		t.Fatal(err)
	}
	wantEnded(t, p, ErrClosed)
	closed := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.Acquire(wctx)
	if err != nil {
		t.Fatalf("a dead holder's permit did not come back (lease %v): %v", lease, err)
	}
	d := time.Since(closed)
	t.Logf("a dead holder's permit came back %v after its Client closed (lease %v)", d, lease)
	if d > lease+3*time.Second { // generous: only a hang, not a slow machine, should fail this
		t.Errorf("the permit came back after %v, long after its lease (%v)", d, lease)
	}
	if err := s.Release(got); err != nil {
		t.Fatal(err)
	}
}

// TestPermitSemaphoreLostReply: an acquire whose reply is lost gives its
// permit back (the id is the caller's), and a re-sent acquire with the same
// id takes one permit, not two.
func TestPermitSemaphoreLostReply(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	proxy := redistest.NewTestProxy(t, redisAddr)
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = prdb.Close() })
	ps := mustPermitSemaphore(t, newClient(t, prdb), name)
	s := mustPermitSemaphore(t, newClient(t, nil), name)
	if _, err := s.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// One connection, already set up, and the script loaded: the dropped
	// reply is the script's.
	if err := scripts.PsemAcquire.Load(ctx, prdb).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.DropNextReply()
	if _, err := ps.TryAcquire(ctx); err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire with its reply dropped: %v", err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Drops())
	}
	eventuallyAvailable(t, s, 2, 0) // the give-back runs in the background, as a lock's

	// go-redis (with its default retries) sends the script again on a new
	// connection: the second run, with the same id, takes no second permit.
	rrdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1})
	t.Cleanup(func() { _ = rrdb.Close() })
	rs := mustPermitSemaphore(t, newClient(t, rrdb), name)
	if err := scripts.PsemAcquire.Load(ctx, rrdb).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.DropNextReply()
	p, err := rs.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire re-sent by go-redis: %v", err)
	}
	if proxy.Drops() != 2 {
		t.Fatalf("%d replies dropped, want 2", proxy.Drops())
	}
	wantAvailable(t, s, 1, 1)
	if err := rs.Release(p); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 2, 0)
}

// TestPermitSemaphoreReleaseResent: a Release whose reply is lost, and
// that go-redis sends again, finds the permit gone, since the first run
// released it: Release reports the release, not ErrNotHeld (the engine
// reads the transport's resent flag, as for a lock's release).
func TestPermitSemaphoreReleaseResent(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	proxy := redistest.NewTestProxy(t, redisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 500 * time.Millisecond, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	ps := mustPermitSemaphore(t, newClient(t, rdb), name)
	s := mustPermitSemaphore(t, newClient(t, nil), name)
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := ps.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The script loaded on the one connection: the dropped reply is the
	// release's.
	if err := scripts.PsemRelease.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.DropNextReply()
	if err := ps.Release(p); err != nil {
		t.Fatalf("Release sent again by go-redis after a lost reply: %v, want nil (the first run released it)", err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Drops())
	}
	if cause := context.Cause(p); !errors.Is(cause, ErrUnlocked) {
		t.Errorf("permit context ended with %v, want ErrUnlocked", cause)
	}
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreNeverMoreThanN: workers on three Clients hold permits
// of N at a time, some with a short fixed lease that they renew by
// UpdateLease; the holders never number more than N.
func TestPermitSemaphoreNeverMoreThanN(t *testing.T) {
	checkPermitBound(t, func(t testing.TB) redis.UniversalClient { return newRedis(t) }, lockName(t), 12, 30)
}

func checkPermitBound(t *testing.T, newRDB func(t testing.TB) redis.UniversalClient, name string, workers, rounds int) {
	const N = 3
	ctx := context.Background()
	var sems []*PermitSemaphore
	for i := range 3 {
		c := newClient(t, newRDB(t))
		var opts []PermitOption
		if i == 2 {
			opts = append(opts, WithPermitLease(5*time.Second))
		}
		sems = append(sems, mustPermitSemaphore(t, c, name, opts...))
	}
	if ok, err := sems[0].TrySetPermits(ctx, N); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	var (
		held, most atomic.Int64
		mu         sync.Mutex
		holds      []interval
		wg         sync.WaitGroup
		start      = time.Now()
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sems[w%len(sems)]
			for r := range rounds {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				p, err := s.Acquire(wctx)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				from := time.Now()
				if h := held.Add(1); h > most.Load() {
					most.Store(h)
				}
				if r%5 == 0 {
					if err := s.UpdateLease(p, 10*time.Second); err != nil {
						t.Error(err)
					}
				} else if _, err := s.AvailablePermits(ctx); err != nil {
					t.Error(err)
				}
				if h := held.Load(); h > N {
					t.Errorf("%d permits held at once, more than %d", h, N)
				}
				if p.Err() != nil {
					t.Errorf("permit lost while held: %v", context.Cause(p))
				}
				held.Add(-1)
				to := time.Now()
				mu.Lock()
				holds = append(holds, interval{from, to})
				mu.Unlock()
				if err := s.Release(p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	awaitGroup(t, &wg, 2*time.Minute, "the workers")
	if got := maxConcurrent(holds); got > N {
		t.Fatalf("recorded intervals: %d permits held at once, more than %d", got, N)
	}
	if most.Load() < N {
		t.Errorf("at most %d permits held at once: the workers did not contend for all %d", most.Load(), N)
	}
	wantAvailable(t, sems[0], N, 0)
	t.Logf("%d permits acquired of %d by %d workers in %v; at most %d held at once",
		len(holds), N, workers, time.Since(start).Round(time.Millisecond), maxConcurrent(holds))
}

// TestPermitSemaphoreRedissonInterop: Go and a simulated Redisson client
// share permits: each releases the other's by id, a Java release wakes a Go
// waiter, a Go release wakes a Java waiter, and a Java permit without lease
// is waited out by polling and messages, never a hang.
func TestPermitSemaphoreRedissonInterop(t *testing.T) {
	testPermitInterop(t, newRedis(t), newClient(t, nil), lockName(t))
}

func testPermitInterop(t *testing.T, rdb redis.UniversalClient, c *Client, name string) {
	ctx := boundedCtx(t, time.Minute)
	java := newJavaSync(rdb, name)
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}

	// Java releases a Go permit by the id Go shows: the ids agree.
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := java.psemAvailable(ctx); n != 0 || err != nil {
		t.Fatalf("Java availablePermits: %d %v", n, err)
	}
	id, _ := s.PermitID(p)
	if ok, err := java.psemRelease(ctx, id); !ok || err != nil {
		t.Fatalf("Java tryRelease(%s) of a Go permit: %v %v", id, ok, err)
	}
	if err := s.Release(p); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Go Release after Java released it: %v", err)
	}

	// A Java permit without lease (score 922337203685477): Go waits (the
	// script answers nil: nothing expires) until the Java release.
	jid, nearest, err := java.psemTryAcquire(ctx, 0)
	if err != nil || jid == "" {
		t.Fatalf("Java tryAcquire: %q %q %v", jid, nearest, err)
	}
	infos, err := s.Permits(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != jid || !infos[0].Expires.IsZero() {
		t.Fatalf("Permits with a Java permit without lease: %+v %v", infos, err)
	}
	got := make(chan context.Context, 1)
	go func() {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitForSyncWaiters(t, c, s.channel, 1)
	released := time.Now()
	if ok, err := java.psemRelease(ctx, jid); !ok || err != nil {
		t.Fatalf("Java release: %v %v", ok, err)
	}
	var gp context.Context
	select {
	case gp = <-got:
		if gp == nil {
			t.FailNow()
		}
		d := time.Since(released)
		t.Logf("Go waiter acquired %v after the Java release", d)
		if d >= pushBound {
			t.Errorf("Go waiter took %v: woken by its poll, not by the Java message", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Go waiter not woken by the Java release")
	}

	// Go release -> Java waiter. Java's first try is told when the Go
	// permit expires (a watchdog lease, not the no-lease score).
	_, nearest, err = java.psemTryAcquire(ctx, time.Minute)
	if err != nil || len(nearest) < 2 || nearest[0] != ':' {
		t.Fatalf("Java tryAcquire while Go holds: %q %v", nearest, err)
	}
	if ms, err := strconv.ParseInt(nearest[1:], 10, 64); err != nil || time.Until(time.UnixMilli(ms)) <= 0 {
		t.Fatalf("Java got expiry %q: not a long in the future (%v)", nearest, err)
	}
	var jwID string
	jw := startJavaWaiter(t, java, java.semChannel(), func(ctx context.Context) (bool, error) {
		id, _, err := java.psemTryAcquire(ctx, time.Minute)
		jwID = id
		return id != "", err
	})
	released = time.Now()
	if err := s.Release(gp); err != nil {
		t.Fatal(err)
	}
	d := jw.wokeWithin(t, released)
	t.Logf("Java waiter acquired %v after the Go release (messages %v)", d, jw.messages())
	if msgs := jw.messages(); len(msgs) != 1 || msgs[0] != "1" {
		t.Errorf("Java waiter heard %v, want [1] (the new count)", msgs)
	}
	// Go releases the Java permit by its id.
	if err := s.ReleaseID(ctx, jwID); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreClose: Close ends a waiting Acquire with ErrClosed
// and cancels held permit contexts with cause ErrClosed; the renewer stops.
func TestPermitSemaphoreClose(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	c := newClient(t, nil)
	s := mustPermitSemaphore(t, c, name)
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx)
		waiting <- err
	}()
	waitForSyncWaiters(t, c, s.channel, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wantEnded(t, p, ErrClosed)
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiting Acquire at Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting Acquire not ended by Close")
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := s.Release(p); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close: %v", err)
	}
	// The permit is still in Redis until its lease runs out; give it back.
	id, _ := s.PermitID(p)
	if err := mustPermitSemaphore(t, newClient(t, nil), name).ReleaseID(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestPermitSemaphoreTopologies runs the bound and interop checks on a
// Sentinel setup and a cluster (sharded pub/sub).
func TestPermitSemaphoreTopologies(t *testing.T) {
	for _, tp := range []topology{sentinelTopology(t), clusterTopology(t)} {
		t.Run(tp.name, func(t *testing.T) {
			t.Run("bound", func(t *testing.T) {
				checkPermitBound(t, tp.redis, topoName(t, tp), 6, 10)
			})
			t.Run("interop", func(t *testing.T) {
				testPermitInterop(t, tp.redis(t), newClient(t, tp.redis(t)), topoName(t, tp))
			})
		})
	}
}

// TestPermitSemaphoreFailover: a permit held across a failover (SENTINEL
// FAILOVER; a frozen cluster master) is renewed on the new master, so its
// context stays live, and its release there wakes a waiter on another
// Client, whose subscription moved to the new master.
func TestPermitSemaphoreFailover(t *testing.T) {
	ctx := context.Background()
	cl, ss := sharedCluster(t), sharedSentinel(t)
	cases := []struct {
		tp topology
		// master serves the name; failover starts one and returns what
		// waits for it to end and heals the topology.
		master   func(name string) *redistest.Server
		failover func(master *redistest.Server) (heal func() error)
	}{{
		tp:     sentinelTopology(t),
		master: func(string) *redistest.Server { return ss.Master() },
		failover: func(master *redistest.Server) func() error {
			if err := ss.Failover(ctx); err != nil {
				t.Fatal(err)
			}
			return func() error { return nil }
		},
	}, {
		tp:     clusterTopology(t),
		master: cl.MasterFor,
		failover: func(master *redistest.Server) func() error {
			master.Pause() // the cluster promotes its replica after the node timeout
			return func() error {
				master.Resume()
				return cl.WaitHealthy(ctx)
			}
		},
	}}
	for _, fc := range cases {
		t.Run(fc.tp.name, func(t *testing.T) {
			tp := fc.tp
			name := topoName(t, tp)
			// Renewed every 5s; the lease (15s) outlasts the failover and
			// the time the clients take to find the new master.
			hs := mustPermitSemaphore(t, newClient(t, tp.redis(t), WithWatchdogTimeout(15*time.Second)), name)
			wc := newClient(t, tp.redis(t))
			ws := mustPermitSemaphore(t, wc, name)
			if _, err := hs.TrySetPermits(ctx, 1); err != nil {
				t.Fatal(err)
			}
			p, err := hs.Acquire(boundedCtx(t, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan context.Context, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				wp, err := ws.Acquire(wctx)
				if err != nil {
					t.Error(err)
				}
				got <- wp
			}()
			waitForSyncWaiters(t, wc, ws.channel, 1)
			if err := tp.caughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			old := fc.master(name)
			first := permitScore(ctx, t, hs, p)
			began := time.Now()
			heal := fc.failover(old)
			healed := false
			t.Cleanup(func() {
				if !healed {
					_ = heal()
				}
			})
			// A renewal lands on the new master: the expiry moves on.
			eventually(t, 30*time.Second, func() error {
				if p.Err() != nil {
					return fmt.Errorf("permit lost across the failover: %w", context.Cause(p))
				}
				if fc.master(name) == old {
					return errors.New("old master still in charge")
				}
				if s, err := ws.AvailablePermits(ctx); err != nil {
					return err
				} else if s != 0 {
					return fmt.Errorf("%d permits available while one is held", s)
				}
				if score := permitScore(ctx, t, hs, p); score <= first {
					return fmt.Errorf("expiry %v not renewed on the new master (was %v)", score, first)
				}
				return nil
			})
			t.Logf("%s: permit renewed on the new master %v after the failover began", tp.name, time.Since(began).Round(10*time.Millisecond))
			released := time.Now()
			if err := hs.Release(p); err != nil {
				t.Fatal(err)
			}
			select {
			case wp := <-got:
				if wp == nil {
					t.FailNow()
				}
				t.Logf("%s: waiter got the permit %v after the release on the new master", tp.name, time.Since(released).Round(time.Millisecond))
				if err := ws.Release(wp); err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("waiter not woken after the failover")
			}
			healed = true
			if err := heal(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// permitScore is the expiry of the permit p holds, as the current master
// has it (0 when missing or unreachable).
func permitScore(ctx context.Context, t *testing.T, s *PermitSemaphore, p context.Context) float64 {
	t.Helper()
	infos, err := s.Permits(ctx)
	if err != nil {
		return 0
	}
	id, _ := s.PermitID(p)
	for _, in := range infos {
		if in.ID == id {
			return float64(in.Expires.UnixMilli())
		}
	}
	return 0
}
