package dlock

import (
	"context"
	"errors"

	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

func mustSemaphore(t testing.TB, c *Client, name string) *Semaphore {
	t.Helper()
	s, err := c.NewSemaphore(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantPermits(t testing.TB, s *Semaphore, want int) {
	t.Helper()
	got, err := s.AvailablePermits(context.Background())
	if err != nil || got != want {
		t.Fatalf("available permits: %d, %v; want %d", got, err, want)
	}
}

func TestSemaphoreOperations(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	s := mustSemaphore(t, newClient(t, nil), name)

	wantPermits(t, s, 0) // never set
	if ok, err := s.TryAcquire(ctx, 1); ok || err != nil {
		t.Fatalf("TryAcquire on an unset semaphore: %v, %v", ok, err)
	}
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v, %v", ok, err)
	}
	if ok, err := s.TrySetPermits(ctx, 5); ok || err != nil {
		t.Fatalf("second TrySetPermits: %v, %v; want false", ok, err)
	}
	wantPermits(t, s, 3)
	if ok, err := s.TryAcquire(ctx, 2); !ok || err != nil {
		t.Fatalf("TryAcquire(2) of 3: %v, %v", ok, err)
	}
	if ok, err := s.TryAcquire(ctx, 2); ok || err != nil {
		t.Fatalf("TryAcquire(2) of 1: %v, %v; want false", ok, err)
	}
	wantPermits(t, s, 1)
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, 3); err != nil {
		t.Fatal(err)
	}
	wantPermits(t, s, 3)
	if err := s.AddPermits(ctx, -4); err != nil {
		t.Fatal(err)
	}
	wantPermits(t, s, -1)
	if err := s.AddPermits(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DrainPermits(ctx); n != 2 || err != nil {
		t.Fatalf("DrainPermits: %d, %v; want 2", n, err)
	}
	wantPermits(t, s, 0)
	if ok, err := s.Delete(ctx); !ok || err != nil {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	if n, err := s.DrainPermits(ctx); n != 0 || err != nil {
		t.Fatalf("DrainPermits of a deleted semaphore: %d, %v", n, err)
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	c := newClient(t, nil)
	s := mustSemaphore(t, c, lockName(t))
	for _, n := range []int{-1} { // 0 is Redisson's no-op: TestSemaphoreZeroPermits
		if err := s.Acquire(ctx, n); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("Acquire(%d): %v", n, err)
		}
		if _, err := s.TryAcquire(ctx, n); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("TryAcquire(%d): %v", n, err)
		}
		if err := s.Release(ctx, n); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("Release(%d): %v", n, err)
		}
	}
	if _, err := s.TrySetPermits(ctx, -1); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("TrySetPermits(-1): %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := s.Acquire(nil, 1); !errors.Is(err, ErrInvalidOption) { //nolint:staticcheck
		t.Errorf("Acquire(nil ctx): %v", err)
	}
	var zero *Semaphore
	if err := zero.Release(ctx, 1); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Release on a nil Semaphore: %v", err)
	}
	for _, name := range []string{"", "a}b", "x{}"} {
		if _, err := c.NewSemaphore(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewSemaphore(%q): %v", name, err)
		}
	}
	var nilClient *Client
	if _, err := nilClient.NewSemaphore("x"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewSemaphore on a nil Client: %v", err)
	}
}

// TestSemaphoreWaitAndClose: a waiting Acquire is woken by a Release from
// another Client, ends with ctx, and returns ErrClosed when its Client is
// closed; a closed Client refuses every call.
//
// The wake-up is timed from the waiter's last try before the releases (a
// hook on its Redis client sees it): a poll would wake it more than
// syncPoll after that try, the releases' messages well within wakeBound.
func TestSemaphoreWaitAndClose(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	rdb, probe := probeScripts(t, name)
	c1, c2 := newClient(t, rdb), newClient(t, nil)
	s1, s2 := mustSemaphore(t, c1, name), mustSemaphore(t, c2, name)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := s1.Acquire(short, 1)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on an empty semaphore with a deadline: %v", err)
	}

	var released time.Time
	d := timeWake(t, probe, c1, s1.channel, "waiter for 2 permits", func() error { return s1.Acquire(ctx, 2) }, func() {
		if err := s2.Release(ctx, 1); err != nil { // one is not enough
			t.Fatal(err)
		}
		released = time.Now()
		if err := s2.Release(ctx, 1); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("waiter for 2 permits acquired %v after its last try, %v after the second release", d, time.Since(released))
	if d >= wakeBound {
		t.Errorf("waiter for 2 permits acquired %v after its last try (two releases on another Client meanwhile): woken by its %v poll, not by the releases' messages", d, syncPoll)
	}
	wantPermits(t, s1, 0)

	got := make(chan error, 1)
	go func() { got <- s1.Acquire(ctx, 1) }()
	waitForSyncWaiters(t, c1, s1.channel, 1)
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "Acquire waiting when its Client closed"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire waiting when its Client closed: %v", err)
	}
	if err := s1.Release(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release on a closed Client: %v", err)
	}
	if _, err := c1.NewSemaphore(name); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewSemaphore on a closed Client: %v", err)
	}
	wantPermits(t, s2, 0)
}

// TestSemaphoreLostMessage: permits that appear without a message (here a
// plain SET, as after a lost message) are found by the bounded poll.
func TestSemaphoreLostMessage(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	c := newClient(t, nil)
	s := mustSemaphore(t, c, name)
	got := make(chan error, 1)
	go func() { got <- s.Acquire(ctx, 1) }()
	waitForSyncWaiters(t, c, s.channel, 1)
	set := time.Now()
	if err := newRedis(t).Set(ctx, name, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, syncPoll+5*time.Second, "a waiter for permits that came without a message"); err != nil {
		t.Fatal(err)
	}
	t.Logf("acquired %v after a silent SET (poll bound %v)", time.Since(set), syncPoll)
}

// TestSemaphoreNeverMoreThanN: workers on three Clients take 1 or 2 permits
// of N at a time; the holders never hold more than N permits together,
// counted live and from the recorded intervals.
func TestSemaphoreNeverMoreThanN(t *testing.T) {
	checkSemaphoreBound(t, func(t testing.TB) redis.UniversalClient { return newRedis(t) }, lockName(t), 12, 40)
}

func checkSemaphoreBound(t *testing.T, newRDB func(t testing.TB) redis.UniversalClient, name string, workers, rounds int) {
	const N = 3
	ctx := context.Background()
	var sems []*Semaphore
	for range 3 {
		sems = append(sems, mustSemaphore(t, newClient(t, newRDB(t)), name))
	}
	if ok, err := sems[0].TrySetPermits(ctx, N); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	var (
		held, most atomic.Int64
		mu         sync.Mutex
		holds      []interval // one per permit held
		wg         sync.WaitGroup
		start      = time.Now()
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sems[w%len(sems)]
			n := 1 + w%2
			for range rounds {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := s.Acquire(wctx, n)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				from := time.Now()
				if h := held.Add(int64(n)); h > most.Load() {
					most.Store(h) // racy max, fine: only ever checked against N
				}
				// Hold for a round trip, long enough for others to overlap.
				if _, err := s.AvailablePermits(ctx); err != nil {
					t.Error(err)
				}
				if h := held.Load(); h > N {
					t.Errorf("%d permits held at once, more than %d", h, N)
				}
				held.Add(-int64(n))
				to := time.Now()
				mu.Lock()
				for range n {
					holds = append(holds, interval{from, to})
				}
				mu.Unlock()
				if err := s.Release(ctx, n); err != nil {
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
	wantPermits(t, sems[0], N)
	if most.Load() < N {
		t.Errorf("at most %d permits held at once: the workers did not contend for all %d", most.Load(), N)
	}
	t.Logf("%d permits acquired (1 or 2 at a time) of %d by %d workers in %v; at most %d held at once (live count %d)",
		len(holds), N, workers, time.Since(start).Round(time.Millisecond), maxConcurrent(holds), most.Load())
}

// TestSemaphoreRedissonInterop: the Java client's release wakes a Go
// waiter, and a Go release wakes a Java waiter, by their messages.
func TestSemaphoreRedissonInterop(t *testing.T) {
	testSemaphoreInterop(t, newRedis(t), newClient(t, nil), lockName(t))
}

func testSemaphoreInterop(t *testing.T, rdb redis.UniversalClient, c *Client, name string) {
	ctx := boundedCtx(t, time.Minute)
	java := newJavaSync(rdb, name)
	s := mustSemaphore(t, c, name)
	if ok, err := java.semTrySet(ctx, 1); !ok || err != nil {
		t.Fatalf("Java trySetPermits: %v %v", ok, err)
	}
	wantPermits(t, s, 1)
	if ok, err := java.semTryAcquire(ctx, 1); !ok || err != nil {
		t.Fatalf("Java tryAcquire: %v %v", ok, err)
	}

	// Java release -> Go waiter.
	got := make(chan time.Time, 1)
	go func() {
		if err := s.Acquire(ctx, 1); err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
	}()
	waitForSyncWaiters(t, c, s.channel, 1)
	released := time.Now()
	if err := java.semRelease(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case at, ok := <-got:
		if !ok {
			t.FailNow()
		}
		d := at.Sub(released)
		t.Logf("Go waiter acquired %v after the Java release", d)
		if d >= pushBound {
			t.Errorf("Go waiter took %v: woken by its poll, not by the Java message", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Go waiter not woken by the Java release")
	}

	// Go release -> Java waiter.
	jw := startJavaWaiter(t, java, java.semChannel(), func(ctx context.Context) (bool, error) {
		return java.semTryAcquire(ctx, 1)
	})
	released = time.Now()
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d := jw.wokeWithin(t, released)
	t.Logf("Java waiter acquired %v after the Go release (messages %v)", d, jw.messages())
	if msgs := jw.messages(); len(msgs) != 1 || msgs[0] != "1" {
		t.Errorf("Java waiter heard %v, want [1] (the new count)", msgs)
	}
	wantPermits(t, s, 0)
	if err := java.semRelease(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wantPermits(t, s, 1)
}

// TestSemaphoreTopologies runs the bound check and the interop check on a
// Sentinel setup and a cluster (sharded pub/sub).
func TestSemaphoreTopologies(t *testing.T) {
	for _, tp := range []topology{sentinelTopology(t), clusterTopology(t)} {
		t.Run(tp.name, func(t *testing.T) {
			t.Run("bound", func(t *testing.T) {
				checkSemaphoreBound(t, tp.redis, topoName(t, tp), 6, 15)
			})
			t.Run("interop", func(t *testing.T) {
				rdb := tp.redis(t)
				testSemaphoreInterop(t, rdb, newClient(t, tp.redis(t)), topoName(t, tp))
			})
		})
	}
}

// TestSemaphoreLostReply: go-redis sends a command again when its reply is
// lost; a counting semaphore's scripts are not idempotent, so dlock has
// them sent once and reports ErrNoReply: a release whose reply was lost
// gives back its permits once, not twice.
func TestSemaphoreLostReply(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	proxy := redistest.NewTestProxy(t, redisAddr)
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1}) // go-redis' default retries
	t.Cleanup(func() { _ = prdb.Close() })
	ps := mustSemaphore(t, newClient(t, prdb), name)
	s := mustSemaphore(t, newClient(t, nil), name)
	// Connected, and the script loaded: the dropped reply is the release's.
	if err := scripts.SemRelease.Load(ctx, prdb).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.DropNextReply()
	if err := ps.Release(ctx, 1); !errors.Is(err, ErrNoReply) {
		t.Fatalf("Release with its reply dropped: %v, want ErrNoReply", err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Drops())
	}
	wantPermits(t, s, 1) // applied once
	// The next Release goes through on a new connection.
	if err := ps.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wantPermits(t, s, 2)
}
