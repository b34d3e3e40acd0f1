package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// lockResult is what a Lock running in a goroutine returns.
type lockResult struct {
	lctx context.Context
	err  error
}

// lockAsync runs l.Lock(ctx) in a goroutine.
func lockAsync(ctx context.Context, l interface {
	Lock(context.Context) (context.Context, error)
}) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		lctx, err := l.Lock(ctx)
		got <- lockResult{lctx, err}
	}()
	return got
}

// await returns the result of lockAsync or fails the test after timeout.
func await(t *testing.T, got <-chan lockResult, timeout time.Duration, what string) context.Context {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.lctx
	case <-time.After(timeout):
		t.Fatalf("%s: not done within %v", what, timeout)
		return nil
	}
}

// otherMaster returns a master of cl other than m.
func otherMaster(t *testing.T, ctx context.Context, cl *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	for _, o := range cl.Masters(ctx) {
		if o != m {
			return o
		}
	}
	t.Fatal("no other master")
	return nil
}

// TestClusterShardedPubSubTraffic counts the cluster-bus messages one
// unlock costs: classic PUBLISH is broadcast to every other node (5 in a
// 6-node cluster), SPUBLISH goes to the other nodes of the lock's shard
// only (its one replica).
func TestClusterShardedPubSubTraffic(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	const cycles = 50
	perUnlock := map[bool]float64{}
	for _, sharded := range []bool{true, false} {
		m := mustMutex(t, newClient(t, tp.redis(t), WithShardedPubSub(sharded)), topoName(t, tp))
		before := busPublishes(t, ctx, cl)
		for range cycles {
			if err := m.Unlock(mustLock(t, ctx, m)); err != nil {
				t.Fatal(err)
			}
		}
		after := busPublishes(t, ctx, cl)
		classic, shard := after[0]-before[0], after[1]-before[1]
		t.Logf("sharded=%v: %d unlocks sent %d PUBLISH and %d SPUBLISH messages over the cluster bus", sharded, cycles, classic, shard)
		if sharded && (classic != 0 || shard > cycles) {
			t.Errorf("sharded: %d publish and %d publishshard bus messages for %d unlocks; want 0 and at most %d", classic, shard, cycles, cycles)
		}
		if !sharded && classic < 5*cycles {
			t.Errorf("broadcast: %d publish bus messages for %d unlocks; want at least %d", classic, cycles, 5*cycles)
		}
		perUnlock[sharded] = float64(classic+shard) / cycles
	}
	t.Logf("cluster-bus messages per unlock: sharded %.1f, broadcast %.1f", perUnlock[true], perUnlock[false])
}

// busPublishes sums, over every node, the publish and publishshard
// messages sent over the cluster bus.
func busPublishes(t testing.TB, ctx context.Context, cl *redistest.Cluster) [2]int {
	t.Helper()
	var sum [2]int
	for _, n := range cl.Nodes() {
		v, err := n.Do(ctx, "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		for i, field := range []string{"cluster_stats_messages_publish_sent", "cluster_stats_messages_publishshard_sent"} {
			sum[i] += infoInt(v.(string), field)
		}
	}
	return sum
}

// infoInt reads an integer field of an INFO or CLUSTER INFO reply; a
// missing field is 0 (Redis lists counters only once they are non-zero).
func infoInt(info, field string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// BenchmarkClusterUnlockPubSub compares an uncontended Lock+Unlock on the
// cluster with sharded and with broadcast unlock messages. Besides time,
// it reports the cluster-bus messages per cycle and the bytes all six
// redis-server processes wrote per cycle (/proc/<pid>/io wchar: client
// replies, the cluster bus and replication).
func BenchmarkClusterUnlockPubSub(b *testing.B) {
	cl := sharedCluster(b)
	tp := clusterTopology(b)
	ctx := context.Background()
	for _, mode := range []struct {
		name    string
		sharded bool
	}{{"sharded", true}, {"broadcast", false}} {
		b.Run(mode.name, func(b *testing.B) {
			m := mustMutex(b, newClient(b, tp.redis(b), WithShardedPubSub(mode.sharded)), topoName(b, tp))
			if err := m.Unlock(mustLock(b, ctx, m)); err != nil { // connect and load the scripts
				b.Fatal(err)
			}
			bus0, wrote0 := busPublishes(b, ctx, cl), nodesWritten(b, ctx, cl)
			b.ResetTimer()
			for b.Loop() {
				lctx, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(lctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			bus1, wrote1 := busPublishes(b, ctx, cl), nodesWritten(b, ctx, cl)
			b.ReportMetric(float64(bus1[0]-bus0[0]+bus1[1]-bus0[1])/float64(b.N), "bus-msgs/op")
			b.ReportMetric(float64(wrote1-wrote0)/float64(b.N), "node-bytes/op")
		})
	}
}

// nodesWritten sums the bytes every node process has written so far.
func nodesWritten(b testing.TB, ctx context.Context, cl *redistest.Cluster) int {
	b.Helper()
	total := 0
	for _, n := range cl.Nodes() {
		v, err := n.Do(ctx, "INFO", "server")
		if err != nil {
			b.Fatal(err)
		}
		io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", infoInt(v.(string), "process_id")))
		if err != nil {
			b.Skipf("no /proc io accounting: %v", err)
		}
		total += infoInt(strings.ReplaceAll(string(io), ": ", ":"), "wchar")
	}
	return total
}

// TestClusterWatchdogBatchesPerSlot: one Client holds locks spread over
// every master with a short watchdog timeout. A renewal script may touch
// one slot only, so the watchdog must batch per slot; if it did not, the
// renewals would fail with CROSSSLOT and the locks would be lost.
func TestClusterWatchdogBatchesPerSlot(t *testing.T) {
	tp := clusterTopology(t)
	ctx := context.Background()
	c := newClient(t, tp.redis(t), WithWatchdogTimeout(600*time.Millisecond))
	base := topoName(t, tp)
	type held struct {
		m    *Mutex
		lctx context.Context
	}
	var holds []held
	slots := map[uint16]bool{}
	for i := range 24 {
		// Pairs share a hash tag, and so a slot and a renewal batch.
		name := fmt.Sprintf("%s:{%d}:%d", base, i/2, i%2)
		m := mustMutex(t, c, name)
		holds = append(holds, held{m, mustLock(t, ctx, m)})
		slots[slot(name)] = true
	}
	time.Sleep(1500 * time.Millisecond) // 2.5 leases: every lock was renewed twice
	for _, h := range holds {
		if n, err := h.m.HoldCount(h.lctx); err != nil || n != 1 || h.lctx.Err() != nil {
			t.Fatalf("%s after 2.5 leases: HoldCount = %d, %v; lock context: %v", h.m.Name(), n, err, context.Cause(h.lctx))
		}
		if err := h.m.Unlock(h.lctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d locks in %d slots renewed", len(holds), len(slots))
}

// TestClusterWaitDuringMigration moves the lock's slot step by step
// (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while a
// holder holds the lock, a waiter waits and a third client tries another
// lock of the same slot. While the slot migrates, Redis serves no script
// with several keys of which some are missing (a new request latch always
// is): the old owner answers TRYAGAIN, or ASK once the key moved, and the
// new owner TRYAGAIN even after ASKING. So the unlock and the acquisition
// are tried again until the migration ends, and then go through after
// MOVED. The waiter, subscribed on the old owner, is woken when the
// migration ends: by the unlock message or by the old owner dropping its
// sharded subscribers, after which it subscribes on the new owner.
func TestClusterWaitDuringMigration(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	name := topoName(t, tp)
	other := "{" + name + "}:other" // same slot
	s := int(slot(name))
	from := cl.MasterFor(name)
	to := otherMaster(t, ctx, cl, from)
	const lease = 30 * time.Second // far longer than the test: wake-ups come from messages
	mA := mustMutex(t, newClient(t, tp.redis(t)), name, WithLease(lease))
	mB := mustMutex(t, newClient(t, tp.redis(t)), name, WithLease(lease))
	mC := mustMutex(t, newClient(t, tp.redis(t)), other, WithLease(lease))

	lA := mustLock(t, ctx, mA)
	gotB := lockAsync(ctx, mB)
	eventually(t, 10*time.Second, func() error { return checkSubscribed(ctx, tp, name) })

	if err := cl.BeginMigration(ctx, s, from, to); err != nil {
		t.Fatal(err)
	}
	finished := false
	t.Cleanup(func() {
		if !finished { // leave the cluster usable for the tests after this one
			_ = cl.MoveSlot(ctx, s, from, to)
		}
	})
	unlocked := make(chan error, 1)
	go func() { unlocked <- mA.Unlock(lA) }()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	gotC := lockAsync(cctx, mC)
	if err := cl.MigrateKeys(ctx, s, from, to); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-unlocked:
		t.Fatalf("unlock returned during the migration: %v", err)
	case r := <-gotC:
		t.Fatalf("lock returned during the migration: %v", r.err)
	case r := <-gotB:
		t.Fatalf("waiter returned during the migration: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cl.FinishMigration(ctx, s, from, to); err != nil {
		t.Fatal(err)
	}
	finished = true
	ended := time.Now()
	if err := recv(t, unlocked, 10*time.Second, "unlock across the migration"); err != nil {
		t.Fatalf("unlock across the migration: %v", err)
	}
	lC := await(t, gotC, 10*time.Second, "lock across the migration")
	lB := await(t, gotB, 10*time.Second, "waiter after the migration ended")
	t.Logf("unlock, lock and the waiter done %v after the migration ended", time.Since(ended).Round(time.Millisecond))
	for _, k := range []string{name, other} {
		if keys := nodeKeys(ctx, to, k); !containsKey(keys, k) {
			t.Errorf("%s is not on the new owner %s (keys there: %v)", k, to.Addr(), keys)
		}
	}
	if err := mB.Unlock(lB); err != nil {
		t.Fatal(err)
	}
	if err := mC.Unlock(lC); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func containsKey(keys []any, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// TestClusterReshardUnderHolder moves the lock's slot, keys and all, to
// another master while a holder renews it with the watchdog and a waiter
// waits: the holder keeps the lock (renewals follow MOVED), and the waiter,
// whose sharded subscription the old owner dropped, is subscribed again on
// the new owner and woken by the unlock.
func TestClusterReshardUnderHolder(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	name := topoName(t, tp)
	from := cl.MasterFor(name)
	to := otherMaster(t, ctx, cl, from)
	holder := newClient(t, tp.redis(t), WithWatchdogTimeout(time.Second))
	waiter := newClient(t, tp.redis(t))
	mH := mustMutex(t, holder, name)
	mW := mustMutex(t, waiter, name, WithLease(30*time.Second))

	lH := mustLock(t, ctx, mH)
	gotW := lockAsync(ctx, mW)
	eventually(t, 10*time.Second, func() error { return checkSubscribed(ctx, tp, name) })
	if err := cl.MoveSlot(ctx, int(slot(name)), from, to); err != nil {
		t.Fatal(err)
	}
	if keys := nodeKeys(ctx, to, name); !containsKey(keys, name) {
		t.Fatalf("lock not moved to %s (keys there: %v)", to.Addr(), keys)
	}
	// The waiter moves its subscription to the new owner.
	eventually(t, 10*time.Second, func() error {
		v, err := to.Do(ctx, "PUBSUB", "SHARDNUMSUB", prefixName(channelPrefix, name))
		if err != nil {
			return err
		}
		if r, _ := v.([]any); len(r) != 2 || r[1] != int64(1) {
			return fmt.Errorf("SHARDNUMSUB on the new owner: %v", v)
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond) // the watchdog renews on the new owner
	if lH.Err() != nil {
		t.Fatalf("holder lost the lock during the reshard: %v", context.Cause(lH))
	}
	select {
	case r := <-gotW:
		t.Fatalf("waiter got in while the lock was held: %v", r.err)
	default:
	}
	released := time.Now()
	if err := mH.Unlock(lH); err != nil {
		t.Fatal(err)
	}
	lW := await(t, gotW, 10*time.Second, "waiter after the unlock on the new owner")
	t.Logf("waiter got the lock %v after the unlock", time.Since(released).Round(time.Millisecond))
	if err := mW.Unlock(lW); err != nil {
		t.Fatal(err)
	}
	if errors.Is(context.Cause(lH), ErrLockLost) {
		t.Fatal("holder's lock context reports a lost lock")
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}
