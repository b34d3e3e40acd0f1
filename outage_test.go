package dlock

import (
	"context"
	"errors"
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
	time.Sleep(300 * time.Millisecond) // the outage: the first give-back fails meanwhile
	g.shut.Store(false)
	reopened := time.Now()
	eventually(t, 10*time.Second, func() error {
		if exists(t, admin, name) {
			return errors.New("the lock is still taken")
		}
		return nil
	})
	t.Logf("given back %v after Redis could be reached again", time.Since(reopened).Round(time.Millisecond))
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
	time.Sleep(300 * time.Millisecond) // the outage: retries fail meanwhile
	g.shut.Store(false)
	reopened := time.Now()
	eventually(t, 10*time.Second, func() error {
		if exists(t, admin, name) {
			return errors.New("the lock is still taken")
		}
		return nil
	})
	t.Logf("released %v after Redis could be reached again", time.Since(reopened).Round(time.Millisecond))
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
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("go-redis refuses to dial a Redis that is back (its dial breaker tripped): %v", err)
	}
}
