package dlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// TestGiveBackOutlivesOutage: an acquire runs in Redis but its reply is
// lost with the connection, and Redis cannot be reached for a while (the
// dial gate is shut; go-redis's own retries are off). Lock fails and gives
// back what the attempt may have taken; that give-back fails too, and must
// be sent again once Redis can be reached, or the lock stays taken for its
// 30 s lease.
func TestGiveBackOutlivesOutage(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t)
	if err := scripts.LockAcquire.Load(ctx, admin).Err(); err != nil {
		t.Fatal(err) // the lost reply must be the script's, not NOSCRIPT's
	}
	proxy := redistest.NewTestProxy(t, redisAddr)
	var g dialGate
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: g.dial, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil { // connect before the drop
		t.Fatal(err)
	}
	c := newClient(t, rdb)
	settleRecord(t, c) // the reply lost must not be the holder record's
	m := mustMutex(t, c, name)

	g.shut.Store(true)
	proxy.DropNextReply()
	if _, err := m.TryLock(ctx); err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with its reply lost: %v, want a connection error", err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("proxy dropped %d replies, want 1", proxy.Drops())
	}
	if !exists(t, admin, name) {
		t.Fatal("the acquire did not run: nothing to give back")
	}
	endOutage(t, &g, admin, name, "given back") // the first give-back fails meanwhile
}

// TestReleaseOutlivesOutage: the last Unlock cannot reach Redis (its
// connections are cut and the dial gate is shut; go-redis's own retries
// are off). Unlock returns the error at once, and the release is sent
// again once Redis can be reached, rather than leaving the lock to its
// 30 s lease.
func TestReleaseOutlivesOutage(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t)
	proxy := redistest.NewTestProxy(t, redisAddr)
	var g dialGate
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: g.dial, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	m := mustMutex(t, newClient(t, rdb), name)
	l := mustLock(t, ctx, m)

	g.shut.Store(true)
	proxy.CloseAll()
	if err := m.Unlock(l); err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock while Redis cannot be reached: %v, want a connection error", err)
	}
	if !exists(t, admin, name) {
		t.Fatal("the lock is gone already: the outage did not stop the release")
	}
	endOutage(t, &g, admin, name, "released") // retries fail meanwhile
}

// TestSameOwnerWaitsForRetriedRelease: while the last Unlock's release is
// retried in the background (Redis cannot be reached), the owner's hold
// is busy, and a Lock by the same owner (through an outer lock context)
// waits for that release to end instead of trying: a lock it took would
// be deleted by the release still on its way. Once Redis is back and the
// release through, the owner takes the lock again.
func TestSameOwnerWaitsForRetriedRelease(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	admin := newRedis(t)
	proxy := redistest.NewTestProxy(t, redisAddr)
	var g dialGate
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: g.dial, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	om := mustMutex(t, c, name+":outer")
	outer := mustLock(t, ctx, om) // its owner is the inner lock's
	m := mustMutex(t, c, name)
	l := mustLock(t, outer, m)

	g.shut.Store(true)
	proxy.CloseAll()
	if err := m.Unlock(l); err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock while Redis cannot be reached: %v, want a connection error", err)
	}
	tctx, cancel := context.WithTimeout(outer, 300*time.Millisecond)
	_, err := m.TryLock(tctx)
	cancel()
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock by the same owner while its release is retried: %v, want ErrNotObtained wrapping DeadlineExceeded (it waits for the release)", err)
	}
	endOutage(t, &g, admin, name, "released")
	l2 := mustLock(t, outer, m)
	if err := m.Unlock(l2); err != nil {
		t.Fatal(err)
	}
	if err := om.Unlock(outer); err != nil {
		t.Fatal(err)
	}
}

// endOutage lets an outage of 300 ms pass, opens the dial gate and waits
// for the lock name to be freed by what dlock sends again (what: how,
// for the log).
func endOutage(t *testing.T, g *dialGate, admin *redis.Client, name, what string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // the outage's length, not a wait for a condition
	g.shut.Store(false)
	reopened := time.Now()
	eventually(t, 10*time.Second, func() error {
		if exists(t, admin, name) {
			return errors.New("the lock is still taken")
		}
		return nil
	})
	t.Logf("%s %v after Redis could be reached again", what, time.Since(reopened).Round(time.Millisecond))
}

// TestOutageSparesDialBreaker: go-redis counts the dials of a client's
// pool that fail and, once PoolSize have, fails every dial at once until
// its own probe, once a second, gets through. While Redis is down, a
// release retried in the background and many failed attempts (each with
// its give-back) must not dial it that often: once Redis is back, the
// application's go-redis client must work at once, not up to a second
// later.
func TestOutageSparesDialBreaker(t *testing.T) {
	ctx := context.Background()
	srv := redistest.NewServer(t)
	const poolSize = 5
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: poolSize, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	var pool poolDials
	rdb.AddHook(&pool)
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)

	srv.Kill()
	if err := m.Unlock(l); err == nil {
		t.Fatal("Unlock with Redis down succeeded")
	}
	var err error
	for range 10 * poolSize {
		if _, err = m.TryLock(ctx); err == nil {
			t.Fatal("TryLock with Redis down succeeded")
		}
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("TryLock with Redis down: %v, want ErrUnreachable", err)
	}
	t.Logf("%d dials of the pool failed while Redis was down", pool.failed.Load())
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("go-redis refuses to dial a Redis that is back (its dial breaker tripped): %v", err)
	}
}

// TestReleaseWaitsOutTrippedBreaker: go-redis's dial breaker has tripped
// (PoolSize dials failed) and refuses to dial for up to a second after
// Redis can be reached again. The Client's probe connects, but the
// release must not be sent over and over while go-redis refuses it: the
// gate opens when a PING through the pool gets through, and the release
// goes then, in a few tries.
func TestReleaseWaitsOutTrippedBreaker(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t)
	proxy := redistest.NewTestProxy(t, redisAddr)
	var shut atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if shut.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	const poolSize = 2
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: dial, PoolSize: poolSize, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	var pool poolDials
	rdb.AddHook(&pool)
	var logs syncBuf
	m := mustMutex(t, newClient(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))), name)
	l := mustLock(t, ctx, m)

	shut.Store(true)
	proxy.CloseAll()
	if err := m.Unlock(l); err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock while Redis cannot be reached: %v, want a connection error", err)
	}
	// Trip the breaker, whatever dlock dialled (dead pooled connections
	// answer EOF first), and check that go-redis stops dialling.
	for i := 0; pool.failed.Load() < poolSize; i++ {
		if i == 100 {
			t.Fatalf("%d dials refused after %d PINGs", pool.failed.Load(), i)
		}
		_ = rdb.Ping(ctx).Err()
	}
	// Once tripped, go-redis dials only to probe, at once and then a
	// second later: let the first probe fail.
	tripped := pool.failed.Load()
	eventually(t, 5*time.Second, func() error {
		if pool.failed.Load() == tripped {
			return errors.New("go-redis has not probed yet")
		}
		return nil
	})
	shut.Store(false)
	if n := pool.dials.Load(); rdb.Ping(ctx).Err() == nil || pool.dials.Load() != n {
		t.Fatal("go-redis dials again at once: its breaker did not trip, the test tests nothing")
	}
	eventually(t, 10*time.Second, func() error {
		if exists(t, admin, name) {
			return errors.New("the lock is still taken")
		}
		return nil
	})
	var tries int
	eventually(t, 5*time.Second, func() error {
		m := regexp.MustCompile(`released after a retry.* tries=(\d+)`).FindStringSubmatch(logs.String())
		if m == nil {
			return errors.New("the release's outcome is not logged")
		}
		tries, _ = strconv.Atoi(m[1])
		return nil
	})
	if tries > 10 {
		t.Errorf("the release was sent %d times while go-redis refused to dial, want a few", tries)
	}
	t.Logf("released after %d tries", tries)
}

// poolDials is a go-redis hook that counts the dials of a client's pools
// (a dial made with the client's Dialer directly is not counted).
type poolDials struct{ dials, failed atomic.Int32 }

func (p *poolDials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p.dials.Add(1)
		conn, err := next(ctx, network, addr)
		if err != nil {
			p.failed.Add(1)
		}
		return conn, err
	}
}

func (p *poolDials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *poolDials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
