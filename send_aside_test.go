package dlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// TestLockWithoutDeadlineOutlastsAsideBound: a Lock whose ctx can be
// cancelled but has no deadline sends its attempt aside (a cluster
// client), bounded by asideTimeout. When the lock's master is paused for
// longer than that bound, the Lock must not fail with a deadline its
// caller never set: it tries again and gets the lock once the master
// answers. A TryLock reports the failure.
func TestLockWithoutDeadlineOutlastsAsideBound(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	defer SetAsideTimeout(300 * time.Millisecond)()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), DialTimeout: time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: time.Second, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	name := topoName(t, tp)
	m := mustMutex(t, c, name)
	ctx, cancel := context.WithCancel(context.Background()) // no deadline
	defer cancel()
	bctx := boundedCtx(t, 30*time.Second)

	pause := func() {
		if _, err := cl.MasterFor(name).Do(bctx, "CLIENT", "PAUSE", "1500", "WRITE"); err != nil {
			t.Fatal(err)
		}
	}
	pause()
	if _, err := m.TryLock(ctx); err == nil {
		t.Fatal("TryLock on a paused master succeeded; want the attempt's failure")
	}
	eventuallyFree(t, name, cl.MasterFor(name)) // what the TryLock may have taken, given back

	pause()
	got := lockAsync(ctx, m)
	lctx := await(t, got, 15*time.Second, "Lock without a deadline across a pause longer than the aside bound")
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
}

// TestLockGivesUpOnAsideTimeoutsPastPatience: a Lock whose ctx can be
// cancelled but has no deadline, on a kind whose attempts go aside (a
// read-write lock's write half), against a server that never answers its
// scripts (writes paused for longer than the test). Every attempt runs out
// of the aside bound; the Lock tries again with a warning while such
// failures last less than asidePatience, then returns the error, which
// says why. It must not try again for ever without a word.
func TestLockGivesUpOnAsideTimeoutsPastPatience(t *testing.T) {
	ctx := context.Background()
	defer SetAsideTimeout(100 * time.Millisecond)()
	defer SetAsidePatience(300 * time.Millisecond)()
	admin := newRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	var logs syncBuffer
	c := newClient(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	rw, err := c.NewRWMutex(lockName(t), WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() }) // before lockName's cleanup

	lctx, cancel := context.WithCancel(ctx) // no deadline: the attempts go aside
	defer cancel()
	got := lockAsync(lctx, rw.WriteLock())
	var r lockResult
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("Lock on a server that never answers still trying after 20 s: its aside timeouts are retried without end")
	}
	if r.err == nil {
		t.Fatal("Lock on a server that never answers succeeded")
	}
	if !errors.Is(r.err, errAsideTimeout) {
		t.Errorf("Lock: %v, want the aside bound's error", r.err)
	}
	if !strings.Contains(logs.String(), "trying again") {
		t.Errorf("no warning that the Lock tried again; logs:\n%s", logs.String())
	}
}

// TestAsideBoundMarksOnlyTimeouts: an attempt handed aside whose reply
// comes after its bound ran out is marked as the bound's timeout
// (errAsideTimeout) only when it failed by timing out; a refusal from
// Redis that happens to come late is returned as it is. Here the server
// holds the script past the bound (writes paused) and then refuses it (the
// lock's key is a string), on a Redis client that ignores ctx deadlines.
func TestAsideBoundMarksOnlyTimeouts(t *testing.T) {
	ctx := context.Background()
	defer SetAsideTimeout(50 * time.Millisecond)()
	admin := newRedis(t)
	c := newClient(t, nil) // go-redis defaults: ctx deadlines ignored
	name := lockName(t)
	rw, err := c.NewRWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, name, "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Loaded: a NOSCRIPT refusal would send EVAL after the bound, which
	// go-redis fails at once with the ctx's error.
	if err := scripts.RWWriteAcquire.Load(ctx, admin).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "400", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithCancel(ctx) // no deadline: the attempt goes aside
	defer cancel()
	_, err = rw.WriteLock().TryLock(tctx)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("TryLock on a string key: %v, want Redis's WRONGTYPE refusal", err)
	}
	if errors.Is(err, errAsideTimeout) {
		t.Errorf("TryLock: %v: a refusal marked as the aside bound's timeout", err)
	}
}
