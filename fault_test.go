package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestLostReplyIsNotAppliedTwice drops the reply to acquire and release
// commands on the way back from Redis. go-redis then sends the same command
// again on a new connection; the request latches must make the second run
// a no-op, or the hold count would be off by one.
func TestLostReplyIsNotAppliedTwice(t *testing.T) {
	ctx := context.Background()
	proxy, err := redistest.NewProxy(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 3})
	defer rdb.Close()
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t), WithFencing())
	check := func(l context.Context, want int) {
		t.Helper()
		if n, err := m.HoldCount(l); err != nil || n != want {
			t.Fatalf("HoldCount = %d, %v; want %d", n, err, want)
		}
	}
	l1 := mustLock(t, ctx, m)
	proxy.DropNextReply()
	l2 := mustLock(t, l1, m) // reentrant acquire, reply lost once
	check(l1, 2)
	if t1, _ := Token(l1); func() int64 { t2, _ := Token(l2); return t2 }() != t1+1 {
		t.Errorf("fencing token advanced twice for one acquisition")
	}
	proxy.DropNextReply()
	if err := m.Unlock(l2); err != nil { // release, reply lost once
		t.Fatal(err)
	}
	check(l1, 1)
	proxy.DropNextReply()
	if err := m.Unlock(l1); err != nil { // final release, reply lost once
		t.Fatalf("final Unlock after a lost reply: %v", err)
	}
	if locked, _ := m.IsLocked(ctx); locked {
		t.Error("still locked")
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
