package dlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestTokensSurviveLostWrites: a failover that loses the counter's last
// increments must not hand out a token again. A replica is cut off from
// its master (made a replica of a dead port: it keeps its data and gets
// nothing new), fenced locks are taken on the master, and the replica is
// promoted (REPLICAOF NO ONE), as Sentinel or Cluster would promote a
// replica that lagged behind. Every token the promoted replica hands out,
// for every fenced kind, must be above every token the old master handed
// out: with a plain INCR it starts again from where replication stopped.
func TestTokensSurviveLostWrites(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	nodes := redistest.NewServers(t, 2)
	master, replica := nodes[0], nodes[1]
	if _, err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.Port())); err != nil {
		t.Fatal(err)
	}
	oldRdb, newRdb := master.Client(), replica.Client()
	t.Cleanup(func() { oldRdb.Close(); newRdb.Close() })
	oldC := newClient(t, oldRdb)
	name := lockName(t)
	kinds := fencedKinds(t, oldC, name)
	// issued is the highest token handed out per kind (each has its own
	// counter: its own name).
	issued := make([]int64, len(kinds))
	takeAll := func(ks []fencedLocker) {
		t.Helper()
		for i, k := range ks {
			lctx := mustLock(t, ctx, k.locker)
			tok, ok := Token(lctx)
			if !ok {
				t.Fatalf("%s: no token", k.name)
			}
			if tok <= issued[i] {
				t.Errorf("%s: token %d, not above %d handed out before", k.name, tok, issued[i])
			}
			issued[i] = max(issued[i], tok)
			if err := k.locker.Unlock(lctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	takeAll(kinds)
	if err := redistest.WaitCaughtUp(ctx, master); err != nil {
		t.Fatal(err)
	}
	counter := "redisson_lock_token:{" + name + "}"
	awaitReplicated(t, ctx, replica, counter)

	// Cut the replica off: it keeps its data and receives none of the
	// tokens taken next.
	deadPort, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(deadPort)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		takeAll(kinds)
	}
	if _, err := replica.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	lost, err := newRdb.Get(ctx, counter).Int64()
	if err != nil || lost >= issued[0] {
		t.Fatalf("the promoted replica's counter is %d (%v), the old master handed out %d: nothing was lost, the test tests nothing", lost, err, issued[0])
	}

	// The clients fail over to the promoted replica.
	takeAll(fencedKinds(t, newClient(t, newRdb), name))
}

// fencedLocker is one fenced lock kind on a name, for the token tests.
type fencedLocker struct {
	name   string
	locker interface {
		Lock(ctx context.Context) (context.Context, error)
		Unlock(ctx context.Context) error
	}
}

// fencedKinds returns a fenced lock of every kind, each with its own
// token counter: a Mutex on name, a FairMutex and an RWMutex's two halves
// (which share a counter) on names derived from it. The first is the
// Mutex.
func fencedKinds(t *testing.T, c *Client, name string) []fencedLocker {
	t.Helper()
	m := mustMutex(t, c, name, WithFencing())
	f, err := c.NewFairMutex(name+":fair", WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.NewRWMutex(name+":rw", WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	return []fencedLocker{{"Mutex", m}, {"FairMutex", f}, {"RWMutex write", rw.WriteLock()}, {"RWMutex read", rw.ReadLock()}}
}

// aboveClock is a token counter value above the server's clock in
// microseconds (until the year 2112), where the fencing token is the
// counter plus one: a test that counts acquisitions by their tokens
// starts the counter there (counterAboveClock).
const aboveClock = int64(1) << 52

// counterAboveClock sets the token counter of the lock name to aboveClock.
func counterAboveClock(t *testing.T, rdb redis.Cmdable, name string) {
	t.Helper()
	key := prefixName(tokenPrefix, name)
	if err := rdb.Set(context.Background(), key, aboveClock, 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
}
