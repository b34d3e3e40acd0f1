package dlock

import (
	"context"
	"testing"
	"time"

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
