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

// TestLostReplyIsNotAppliedTwice drops the reply to a first acquire, a
// reentrant acquire and the final release on the way back from Redis.
// go-redis then sends the same command again on a new connection, and the
// second run must be a no-op: the owner's field stays 1, each acquisition
// takes one fencing token, and the re-sent release, finding nothing to
// release, still counts as released (the Client knows it re-sent it).
func TestLostReplyIsNotAppliedTwice(t *testing.T) {
	ctx := context.Background()
	proxy, err := redistest.NewProxy(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 3})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil { // connect before the drops
		t.Fatal(err)
	}
	admin := newRedis(t)
	// Cached scripts: the replies lost must be the scripts', not NOSCRIPT.
	for _, s := range []*redis.Script{scripts.LockAcquire, scripts.LockRelease} {
		if err := s.Load(ctx, admin).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t), WithFencing())
	counterAboveClock(t, admin, m.Name())
	counter := func() int64 {
		t.Helper()
		n, err := admin.Get(ctx, prefixName(tokenPrefix, m.Name())).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	field := func(l context.Context) int {
		t.Helper()
		owner, _ := ownerFrom(l, c)
		n, err := admin.HGet(ctx, m.Name(), owner).Int()
		if err != nil {
			t.Fatalf("owner's field: %v", err)
		}
		return n
	}

	settleRecord(t, c) // the replies lost must not be the holder record's
	proxy.DropNextReply()
	l1 := mustLock(t, ctx, m) // first acquire, reply lost once
	if t1, _ := Token(l1); t1 != aboveClock+1 || counter() != t1 {
		t.Errorf("first token %d, counter %d; want %d for both (one acquisition)", t1, counter(), aboveClock+1)
	}
	t1, _ := Token(l1)
	proxy.DropNextReply()
	l2 := mustLock(t, l1, m) // reentrant acquire, reply lost once
	if t2, _ := Token(l2); t2 != t1+1 || counter() != t2 {
		t.Errorf("reentrant token %d, counter %d; want %d for both", t2, counter(), t1+1)
	}
	if n := field(l1); n != 1 {
		t.Errorf("owner's field %d in Redis, want 1 (re-entries are counted in the Client)", n)
	}
	if n, err := m.HoldCount(l1); n != 2 || err != nil {
		t.Fatalf("HoldCount = %d, %v; want 2", n, err)
	}
	if err := m.Unlock(l2); err != nil { // inner: counted in the Client
		t.Fatal(err)
	}
	proxy.DropNextReply()
	if err := m.Unlock(l1); err != nil { // final release, reply lost once
		t.Fatalf("final Unlock after a lost reply: %v", err)
	}
	if n, err := admin.Exists(ctx, m.Name()).Result(); n != 0 || err != nil {
		t.Errorf("lock still there (%d, %v)", n, err)
	}
	if !errors.Is(context.Cause(l1), ErrUnlocked) {
		t.Errorf("cause %v, want ErrUnlocked", context.Cause(l1))
	}
	if proxy.Drops() != 3 {
		t.Errorf("proxy dropped %d replies, want 3", proxy.Drops())
	}
}

// TestLostWhenRenewalsFail: the server stops answering (SIGSTOP), so no
// renewal gets through; the holder must be told once the lease has run out
// on its own clock, without waiting for Redis.
func TestLostWhenRenewalsFail(t *testing.T) {
	ctx := context.Background()
	srv := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Second})
	defer rdb.Close()
	const timeout = 300 * time.Millisecond
	c := newClient(t, rdb, WithWatchdogTimeout(timeout))
	m := mustMutex(t, c, "paused")
	start := time.Now()
	l := mustLock(t, ctx, m)
	srv.Pause()
	defer srv.Resume()
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("holder not told while renewals could not reach Redis")
	}
	if d := time.Since(start); d > timeout+500*time.Millisecond {
		t.Errorf("told after %v, lease %v", d, timeout)
	}
	if !errors.Is(context.Cause(l), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l))
	}
}
