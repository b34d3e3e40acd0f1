package dlocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// quick is the watchdog timeout of the tests' Clients: a holder hears of
// a lost lock within a third of it.
var quick = dlock.WithWatchdogTimeout(300 * time.Millisecond)

// within waits for ch, failing the test if nothing comes within d.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
		var zero T
		return zero
	}
}

// lockLater locks m in a new goroutine and sends the lock context, or the
// error, on the channel it returns.
func lockLater(ctx context.Context, m *dlock.Mutex) <-chan error {
	got := make(chan error, 1)
	go func() {
		lc, err := m.Lock(ctx)
		if err == nil {
			err = m.Unlock(lc)
		}
		got <- err
	}()
	return got
}

// awaitWaiter waits until someone waits on m's unlock channel.
func awaitWaiter(t *testing.T, rdb *redis.Client, channel string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rdb.PubSubNumSub(t.Context(), channel).Val()[channel] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nobody subscribed to %s", channel)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestTakeWaitLose: the three things a user's test does with a lock on
// the embedded server: take it, wait for it (woken by the unlock message),
// and lose it when FastForward runs its lease out.
func TestTakeWaitLose(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := t.Context()
	// The holder's lease is the default 30 s: a waiter that gets the lock
	// within seconds was woken by the unlock message, not by the lease.
	a, err := srv.Client(t).NewMutex("orders")
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.Client(t, quick).NewMutex("orders")
	if err != nil {
		t.Fatal(err)
	}
	held, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotObtained", err)
	}
	got := lockLater(ctx, b)
	awaitWaiter(t, srv.Redis(t), "redisson_lock__channel:{orders}")
	if err := a.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if err := within(t, got, 5*time.Second, "waiter after the unlock"); err != nil {
		t.Fatal(err)
	}

	lc, err := b.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.FastForward(time.Minute)
	within(t, lc.Done(), 5*time.Second, "holder told of its lost lock")
	if !errors.Is(context.Cause(lc), dlock.ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(lc))
	}
	if err := b.Unlock(lc); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lock: %v, want ErrNotHeld", err)
	}
}

// TestLeaseRunsOutInRealTime: keys expire as time passes, as on Redis: a
// crashed holder's lock (its Client closed without Unlock) is free once
// its lease has run out, without FastForward.
func TestLeaseRunsOutInRealTime(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := t.Context()
	crashed := srv.Client(t, quick)
	m, err := crashed.NewMutex("job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = crashed.Close() // no Unlock: the lease (300 ms) is left to run out
	rescuer, err := srv.Client(t, quick).NewMutex("job")
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lc, err := rescuer.Lock(wait)
	if err != nil {
		t.Fatalf("the crashed holder's lock did not expire: %v", err)
	}
	if err := rescuer.Unlock(lc); err != nil {
		t.Fatal(err)
	}
}

// TestFastForwardMovesTime: FastForward moves the server's TIME with its
// TTLs, so that what scripts date by TIME runs out too: a
// PermitSemaphore's leased permit comes back to the pool.
func TestFastForwardMovesTime(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := t.Context()
	rdb := srv.Redis(t)
	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	s, err := srv.Client(t).NewPermitSemaphore("pool", dlock.WithPermitLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := srv.Client(t).NewPermitSemaphore("pool", dlock.WithPermitLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire with no permit left: %v, want ErrNotObtained", err)
	}
	srv.FastForward(2 * time.Hour)
	after, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d < 2*time.Hour || d > 2*time.Hour+time.Minute {
		t.Errorf("TIME moved %v after FastForward(2h)", d)
	}
	pc, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after the lease ran out: %v", err)
	}
	if err := other.Release(pc); err != nil {
		t.Fatal(err)
	}
}

// TestOutage: a stopped server makes TryLock fail at once with
// ErrUnreachable; a waiting Lock gets the lock once the server is back.
func TestOutage(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := t.Context()
	m, err := srv.Client(t).NewMutex("orders")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lc); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	// The first call finds the connection dead, after go-redis's own
	// retries; the Client's gate is shut from then on.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := m.TryLock(ctx)
		if errors.Is(err, dlock.ErrUnreachable) {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("TryLock on a stopped server: %v, want ErrUnreachable", err)
		}
	}
	start := time.Now()
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrUnreachable) {
		t.Fatalf("TryLock while the gate is shut: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("TryLock took %v to fail while the gate is shut", d)
	}
	got := lockLater(ctx, m)
	srv.Restart()
	if err := within(t, got, 5*time.Second, "Lock after the restart"); err != nil {
		t.Fatal(err)
	}
	// The restarted server is still the kit's: it refuses what it cannot
	// honour.
	if err := srv.Redis(t).Do(ctx, "WAIT", 1, 10).Err(); err == nil || !strings.Contains(err.Error(), "dlocktest:") {
		t.Errorf("WAIT after the restart: %v, want the kit's refusal", err)
	}
}

// TestFlush: Flush deletes every lock; the holder hears at its next
// renewal, and another owner takes the lock at once.
func TestFlush(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := t.Context()
	m, err := srv.Client(t, quick).NewMutex("orders")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Flush()
	other, err := srv.Client(t).NewMutex("orders")
	if err != nil {
		t.Fatal(err)
	}
	olc, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Flush: %v", err)
	}
	within(t, lc.Done(), 5*time.Second, "holder told that Flush deleted its lock")
	if !errors.Is(context.Cause(lc), dlock.ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(lc))
	}
	if err := other.Unlock(olc); err != nil {
		t.Fatal(err)
	}
}

// TestNew: New's Client is on a server of its own for the test, which is
// closed when the test ends.
func TestNew(t *testing.T) {
	var c *dlock.Client
	t.Run("inner", func(t *testing.T) {
		c = dlocktest.New(t)
		if err := c.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := c.NewMutex("a"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("NewMutex after the test ended: %v, want ErrClosed", err)
	}
}

// TestUnsupported: what the embedded server cannot do fails at once, with
// an error naming the limitation and DLOCK_TEST_REDIS_URL, never a hang.
func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		name  string
		want  string // in the error
		try   func(t *testing.T, srv *dlocktest.Server) error
		close func()
	}{{
		name: "WithReplicaSync",
		want: "WAIT is not supported by the embedded server",
		try: func(t *testing.T, srv *dlocktest.Server) error {
			m, err := srv.Client(t, dlock.WithReplicaSync(1, 100*time.Millisecond)).NewMutex("a")
			if err != nil {
				return err
			}
			_, err = m.Lock(t.Context())
			return err
		},
	}, {
		name: "Cluster",
		want: "not a cluster",
		try: func(t *testing.T, srv *dlocktest.Server) error {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := dlock.New(rdb)
			if err != nil {
				return err
			}
			t.Cleanup(func() { _ = c.Close() })
			m, err := c.NewMutex("a")
			if err != nil {
				return err
			}
			_, err = m.Lock(t.Context())
			return err
		},
	}, {
		name: "Sentinel",
		want: "not a Sentinel",
		try: func(t *testing.T, srv *dlocktest.Server) error {
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{srv.Addr()}})
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := dlock.New(rdb)
			if err != nil {
				return err
			}
			t.Cleanup(func() { _ = c.Close() })
			m, err := c.NewMutex("a")
			if err != nil {
				return err
			}
			_, err = m.Lock(t.Context())
			return err
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			srv := dlocktest.NewServer(t)
			if !srv.Embedded() {
				t.Skip("a real server")
			}
			got := make(chan error, 1)
			go func() { got <- c.try(t, srv) }()
			err := within(t, got, 3*time.Second, c.name+" on the embedded server")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dlocktest.EnvRedisURL) {
				t.Errorf("error %v; want one saying %q and naming %s", err, c.want, dlocktest.EnvRedisURL)
			}
		})
	}
}
