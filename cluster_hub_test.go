package dlock

// Tests of the sharded hub on a cluster with many slots: one pub/sub
// connection per master however many slots the waiters span, and every
// slot's channels subscribed again after a reconnect or a reshard.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// manyWaits is a waiter Client waiting on locks that a holder Client holds.
type manyWaits struct {
	holder, waiter *Client
	names          []string
	held           []context.Context
	waits          []<-chan lockResult
}

// waitOnMany has holder take each lock of names and waiter wait for it, and
// returns once every waiter's subscription is confirmed. The lease is far
// longer than the test: wake-ups come from messages.
func waitOnMany(t *testing.T, tp topology, names []string) *manyWaits {
	t.Helper()
	ctx := context.Background()
	mw := &manyWaits{holder: newClient(t, tp.redis(t)), waiter: newClient(t, tp.redis(t)), names: names}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	for _, n := range names {
		mw.held = append(mw.held, mustLock(t, ctx, mustMutex(t, mw.holder, n, WithLease(60*time.Second))))
		mw.waits = append(mw.waits, lockAsync(wctx, mustMutex(t, mw.waiter, n, WithLease(60*time.Second))))
	}
	eventually(t, 20*time.Second, func() error {
		for _, n := range names {
			if w := mw.waiter.hub.Waiters(prefixName(channelPrefix, n)); w != 1 {
				return fmt.Errorf("%s: %d waiters", n, w)
			}
		}
		return nil
	})
	return mw
}

// release unlocks every lock and checks that each waiter gets it.
func (mw *manyWaits) release(t *testing.T) {
	t.Helper()
	for i, n := range mw.names {
		if err := mustMutex(t, mw.holder, n).Unlock(mw.held[i]); err != nil {
			t.Fatal(err)
		}
		lctx := await(t, mw.waits[i], 10*time.Second, "waiter on "+n)
		if err := mustMutex(t, mw.waiter, n).Unlock(lctx); err != nil {
			t.Fatal(err)
		}
	}
}

// manyNames returns n lock names in (about) n different slots.
func manyNames(t *testing.T, tp topology, n int) []string {
	base := topoName(t, tp)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s:{%d}", base, i)
	}
	return names
}

// checkConnections checks that the waiter's hub has one connection per
// master serving its channels, and that the nodes count no more sharded
// subscriber connections than before plus the masters.
func checkConnections(ctx context.Context, cl *redistest.Cluster, mw *manyWaits, before int) error {
	masters := map[string]bool{}
	for _, n := range mw.names {
		masters[cl.MasterFor(prefixName(channelPrefix, n)).Addr()] = true
	}
	if got := mw.waiter.hub.Connections(); got != len(masters) {
		return fmt.Errorf("%d subscription connections for channels on %d masters", got, len(masters))
	}
	if got := pubsubConns(ctx, cl); got > before+len(cl.Masters(ctx)) {
		return fmt.Errorf("%d pub/sub connections on the nodes (%d before the test)", got, before)
	}
	return nil
}

// pubsubConns counts the pub/sub connections on every node (CLIENT LIST).
func pubsubConns(ctx context.Context, cl *redistest.Cluster) int {
	total := 0
	for _, n := range cl.Nodes() {
		v, err := n.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub")
		if err != nil {
			continue
		}
		if s, _ := v.(string); s != "" {
			total += strings.Count(strings.TrimSpace(s), "\n") + 1
		}
	}
	return total
}

// checkShardSubscribed checks that each channel of names has one sharded
// subscriber on the master serving it now.
func checkShardSubscribed(ctx context.Context, cl *redistest.Cluster, names []string) error {
	for _, n := range names {
		ch := prefixName(channelPrefix, n)
		m := cl.MasterFor(ch)
		v, err := m.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch)
		if err != nil {
			return err
		}
		if r, _ := v.([]any); len(r) != 2 || r[1] != int64(1) {
			return fmt.Errorf("SHARDNUMSUB %s on %s: %v", ch, m.Addr(), v)
		}
	}
	return nil
}

// TestClusterSubscriptionsPerMaster: a Client waiting on 200 locks in
// about 200 slots holds one sharded subscription connection per master,
// not one per slot, every waiter is woken by its unlock, and the
// connections close with the last waiter.
func TestClusterSubscriptionsPerMaster(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	before := pubsubConns(ctx, cl)
	names := manyNames(t, tp, 200)
	slots := map[uint16]bool{}
	for _, n := range names {
		slots[slot(prefixName(channelPrefix, n))] = true
	}
	if len(slots) <= 100 {
		t.Fatalf("only %d slots", len(slots))
	}
	mw := waitOnMany(t, tp, names)
	eventually(t, 10*time.Second, func() error { return checkConnections(ctx, cl, mw, before) })
	t.Logf("%d waiters in %d slots on %d connections", len(names), len(slots), mw.waiter.hub.Connections())
	mw.release(t)
	eventually(t, 5*time.Second, func() error {
		if got := mw.waiter.hub.Connections(); got != 0 {
			return fmt.Errorf("%d subscription connections left", got)
		}
		return nil
	})
}

// TestClusterHubReconnectEverySlot kills the waiter's pub/sub connections
// while they carry channels of many slots each: the hub subscribes every
// channel again, one SSUBSCRIBE per slot (go-redis's one SSUBSCRIBE for all
// of a connection's channels is refused with CROSSSLOT), on one connection
// per master, and every waiter is still woken by its unlock.
func TestClusterHubReconnectEverySlot(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	before := pubsubConns(ctx, cl)
	mw := waitOnMany(t, tp, manyNames(t, tp, 30))
	eventually(t, 10*time.Second, func() error { return checkShardSubscribed(ctx, cl, mw.names) })
	for _, m := range cl.Masters(ctx) {
		if _, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, func() error {
		if err := checkShardSubscribed(ctx, cl, mw.names); err != nil {
			return err
		}
		return checkConnections(ctx, cl, mw, before)
	})
	mw.release(t)
}

// TestClusterReshardMovesOneSlot moves the slot of one lock whose waiter
// shares its connection with waiters on other slots of the same master:
// the node drops that slot's channel, which the hub subscribes on the new
// owner's connection; the other channels stay, and every waiter is woken.
func TestClusterReshardMovesOneSlot(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	before := pubsubConns(ctx, cl)
	all := manyNames(t, tp, 30)
	from := cl.MasterFor(prefixName(channelPrefix, all[0]))
	var names []string // all on from, in several slots
	for _, n := range all {
		if cl.MasterFor(prefixName(channelPrefix, n)) == from {
			names = append(names, n)
		}
	}
	if len(names) < 3 {
		t.Fatalf("only %d locks on %s", len(names), from.Addr())
	}
	mw := waitOnMany(t, tp, names)
	eventually(t, 10*time.Second, func() error { return checkShardSubscribed(ctx, cl, names) })
	to := otherMaster(t, ctx, cl, from)
	moved := prefixName(channelPrefix, names[0])
	if err := cl.MoveSlot(ctx, int(slot(moved)), from, to); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, func() error {
		if m := cl.MasterFor(moved); m != to {
			return fmt.Errorf("%s still served by %s", moved, m.Addr())
		}
		if err := checkShardSubscribed(ctx, cl, names); err != nil {
			return err
		}
		return checkConnections(ctx, cl, mw, before)
	})
	mw.release(t)
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClusterRouterRefreshReloads: the go-redis router's Refresh returns
// once the slot table is reloaded, so that the channels the hub moves
// right after go to the slot's new master (go-redis's ReloadState only
// starts a reload, and skips one within 200 ms of the last).
func TestClusterRouterRefreshReloads(t *testing.T) {
	cl := sharedCluster(t)
	ctx := boundedCtx(t, 60*time.Second)
	r := clusterRouter(newClusterRedis(t, cl, time.Second))
	ch := prefixName(channelPrefix, topoName(t, clusterTopology(t)))
	from := cl.MasterFor(ch)
	if got := r.Node(ctx, ch); got != from.Addr() {
		t.Fatalf("Node = %s, want %s", got, from.Addr())
	}
	to := otherMaster(t, ctx, cl, from)
	if err := cl.MoveSlot(ctx, int(slot(ch)), from, to); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.WaitHealthy(context.Background()); err != nil {
			t.Error(err)
		}
	})
	// Every node must name the new owner, whichever one go-redis asks.
	eventually(t, 15*time.Second, func() error {
		for _, n := range cl.Nodes() {
			v, err := n.Do(ctx, "CLUSTER", "SLOTS")
			if err != nil {
				return err
			}
			if got := slotOwner(v, int(slot(ch))); got != to.Port() {
				return fmt.Errorf("%s names port %d for the slot", n.Addr(), got)
			}
		}
		return nil
	})
	r.Refresh(ctx) // a first reload, whose cooldown skips the next
	r.Refresh(ctx)
	if got := r.Node(ctx, ch); got != to.Addr() {
		t.Fatalf("Node after Refresh = %s, want the new owner %s", got, to.Addr())
	}
}

// slotOwner returns the master's port for slot in a CLUSTER SLOTS reply,
// or 0.
func slotOwner(v any, slot int) int {
	rows, _ := v.([]any)
	for _, row := range rows {
		f, _ := row.([]any)
		if len(f) < 3 {
			continue
		}
		from, _ := f[0].(int64)
		to, _ := f[1].(int64)
		m, _ := f[2].([]any)
		if int64(slot) >= from && int64(slot) <= to && len(m) >= 2 {
			port, _ := m[1].(int64)
			return int(port)
		}
	}
	return 0
}

// TestClusterRouterRefreshLeavesWithCaller: go-redis (without
// ContextTimeoutEnabled) does not end a read of CLUSTER SLOTS when its ctx
// is cancelled, only at its ReadTimeout. With every node paused, the
// router's Refresh still returns when its caller's ctx is cancelled: a
// hub closing on a frozen cluster does not wait for the read.
func TestClusterRouterRefreshLeavesWithCaller(t *testing.T) {
	cl := redistest.NewCluster(t) // its own: every node is paused
	r := clusterRouter(newClusterRedis(t, cl, 3*time.Second))
	r.Refresh(context.Background()) // the table, while the nodes answer
	for _, n := range cl.Nodes() {
		n.Pause()
		t.Cleanup(n.Resume)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(50*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	r.Refresh(ctx)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Refresh took %v after its ctx was cancelled at 50ms", took.Round(time.Millisecond))
	}
}
