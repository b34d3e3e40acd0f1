package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The cluster (3 masters, 3 replicas) and the Sentinel setup (master,
// replica, 3 sentinels) are started once per test binary, on first use, and
// closed by TestMain. Tests that fail a node over leave them healthy again
// (WaitHealthy, Rejoin) for the tests after them, so none of the tests that
// use them may run in parallel with another top-level test.
var topologies struct {
	mu       sync.Mutex
	cluster  *redistest.Cluster
	sentinel *redistest.Sentinel
}

// sharedCluster returns the package's cluster, starting it if needed.
func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	topologies.mu.Lock()
	defer topologies.mu.Unlock()
	if topologies.cluster == nil {
		c, err := redistest.StartCluster()
		if err != nil {
			t.Fatal(err)
		}
		topologies.cluster = c
	}
	return topologies.cluster
}

// sharedSentinel returns the package's Sentinel setup, starting it if needed.
func sharedSentinel(t testing.TB) *redistest.Sentinel {
	t.Helper()
	topologies.mu.Lock()
	defer topologies.mu.Unlock()
	if topologies.sentinel == nil {
		s, err := redistest.StartSentinel()
		if err != nil {
			t.Fatal(err)
		}
		topologies.sentinel = s
	}
	return topologies.sentinel
}

// closeTopologies closes what sharedCluster and sharedSentinel started.
func closeTopologies() error {
	topologies.mu.Lock()
	defer topologies.mu.Unlock()
	var errs []error
	if topologies.cluster != nil {
		errs = append(errs, topologies.cluster.Close())
	}
	if topologies.sentinel != nil {
		errs = append(errs, topologies.sentinel.Close())
	}
	topologies.cluster, topologies.sentinel = nil, nil
	return errors.Join(errs...)
}

// topology is a production setup the tests run every lock kind on.
type topology struct {
	name string
	// newRedis returns a new go-redis client for the topology with the
	// given read timeout, closed with t.
	newRedis func(t testing.TB, readTimeout time.Duration) redis.UniversalClient
	// nodes returns every data node, masters and replicas.
	nodes func() []*redistest.Server
	// caughtUp waits until every master's replicas acknowledge its writes
	// (redistest.WaitCaughtUp), as replica sync needs.
	caughtUp func(ctx context.Context) error
}

// redis returns a new go-redis client for the topology, closed with t. Its
// timeouts are short, so that a failed node is given up on quickly.
func (tp topology) redis(t testing.TB) redis.UniversalClient { return tp.newRedis(t, time.Second) }

// syncedClient returns a Client with WithReplicaSync(1, 1s) on the topology
// (generous on a loaded machine, and within the read timeout, as it must
// be), once the replicas acknowledge writes.
func (tp topology) syncedClient(t testing.TB) *Client {
	t.Helper()
	if err := tp.caughtUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return newClient(t, tp.newRedis(t, 3*time.Second), WithReplicaSync(1, time.Second))
}

func clusterTopology(t testing.TB) topology {
	cl := sharedCluster(t)
	return topology{
		name: "cluster",
		newRedis: func(t testing.TB, readTimeout time.Duration) redis.UniversalClient {
			return newClusterRedis(t, cl, readTimeout)
		},
		nodes: cl.Nodes,
		caughtUp: func(ctx context.Context) error {
			for _, m := range cl.Masters(ctx) {
				if err := redistest.WaitCaughtUp(ctx, m); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func sentinelTopology(t testing.TB) topology {
	s := sharedSentinel(t)
	return topology{
		name: "sentinel",
		newRedis: func(t testing.TB, readTimeout time.Duration) redis.UniversalClient {
			return newSentinelRedis(t, s, readTimeout)
		},
		nodes:    func() []*redistest.Server { return []*redistest.Server{s.Master(), s.Replica()} },
		caughtUp: func(ctx context.Context) error { return redistest.WaitCaughtUp(ctx, s.Master()) },
	}
}

// sentinelPauseTopology is the Sentinel setup under another name, for the
// failover test that freezes the master instead of asking for a failover.
func sentinelPauseTopology(t testing.TB) topology {
	tp := sentinelTopology(t)
	tp.name = "sentinel-pause"
	return tp
}

// newClusterRedis returns a cluster client, closed with t.
func newClusterRedis(t testing.TB, cl *redistest.Cluster, readTimeout time.Duration) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		DialTimeout:  time.Second,
		ReadTimeout:  readTimeout,
		WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newSentinelRedis returns a Sentinel failover client, closed with t.
func newSentinelRedis(t testing.TB, s *redistest.Sentinel, readTimeout time.Duration) *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName(),
		SentinelAddrs: s.SentinelAddrs(),
		DialTimeout:   time.Second,
		ReadTimeout:   readTimeout,
		WriteTimeout:  time.Second,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// topoName returns a lock name unique to the test and registers a check,
// run when the test ends, that no node has a subscriber left on a channel
// of the lock (classic or sharded), and then deletes the lock's keys.
func topoName(t testing.TB, tp topology) string {
	t.Helper()
	name := "topo:" + strings.NewReplacer("/", ":", "{", "", "}", "").Replace(t.Name())
	t.Cleanup(func() {
		ctx := context.Background()
		eventually(t, 10*time.Second, func() error {
			for _, n := range tp.nodes() {
				for _, cmd := range []string{"CHANNELS", "SHARDCHANNELS"} {
					v, err := n.Do(ctx, "PUBSUB", cmd, "*"+name+"*")
					if err != nil {
						return err
					}
					if chans, _ := v.([]any); len(chans) > 0 {
						return fmt.Errorf("%s: subscribers left on %v", n.Addr(), chans)
					}
				}
			}
			return nil
		})
		for _, n := range tp.nodes() {
			if keys := nodeKeys(ctx, n, name); len(keys) > 0 {
				_, _ = n.Do(ctx, append([]any{"DEL"}, keys...)...)
			}
		}
	})
	return name
}

// nodeKeys returns the keys on n whose names contain s.
func nodeKeys(ctx context.Context, n *redistest.Server, s string) []any {
	v, err := n.Do(ctx, "KEYS", "*"+s+"*")
	if err != nil {
		return nil
	}
	keys, _ := v.([]any)
	return keys
}

// kindCase is one way of excluding: a holder and a waiter lock on the same
// name that cannot be held together.
type kindCase struct {
	name           string
	holder, waiter func(t testing.TB, c *Client, name string, opts ...LockOption) Locker
	// breaker returns a lock whose ForceUnlock ends the holder's hold;
	// nil: the holder itself.
	breaker func(t testing.TB, c *Client, name string) forceUnlocker
	// members are the names of the locks the holder takes; nil: name.
	members func(name string) []string
	// polls is set for kinds whose waiters retry on a timer instead of
	// subscribing (RedLock: its servers share no channel).
	polls bool
}

type forceUnlocker interface {
	ForceUnlock(context.Context) (bool, error)
}

type holdCounter interface {
	HoldCount(context.Context) (int, error)
}

// topologyKinds lists every lock kind the topology tests run.
func topologyKinds() []kindCase {
	mutex := func(t testing.TB, c *Client, name string, opts ...LockOption) Locker {
		return mustMutex(t, c, name, opts...)
	}
	fair := func(t testing.TB, c *Client, name string, opts ...LockOption) Locker {
		return must(c.NewFairMutex(name, opts...))(t)
	}
	read := func(t testing.TB, c *Client, name string, opts ...LockOption) Locker {
		return must(c.NewRWMutex(name, opts...))(t).ReadLock()
	}
	write := func(t testing.TB, c *Client, name string, opts ...LockOption) Locker {
		return must(c.NewRWMutex(name, opts...))(t).WriteLock()
	}
	// A MultiLock over two Mutexes, in different slots on the cluster.
	multiMembers := func(name string) []string { return []string{name + ":a", name + ":b"} }
	multi := func(t testing.TB, c *Client, name string, opts ...LockOption) Locker {
		var members []Locker
		for _, n := range multiMembers(name) {
			members = append(members, mustMutex(t, c, n, opts...))
		}
		return must(NewMultiLock(members...))(t)
	}
	// A RedLock over the topology under test, the other topology and the
	// package's plain server.
	red := func(t testing.TB, c *Client, name string, opts ...LockOption) Locker {
		other := clusterTopology(t)
		if c.cluster {
			other = sentinelTopology(t)
		}
		clients := []*Client{c, newClient(t, other.redis(t), WithWatchdogTimeout(c.cfg.watchdogTimeout)),
			newClient(t, nil, WithWatchdogTimeout(c.cfg.watchdogTimeout))}
		return must(NewRedLock(clients, name, opts...))(t)
	}
	return []kindCase{
		{name: "Mutex", holder: mutex, waiter: mutex},
		{name: "FairMutex", holder: fair, waiter: fair},
		{name: "RWMutex-write-read", holder: write, waiter: read},
		{name: "RWMutex-read-write", holder: read, waiter: write},
		{name: "MultiLock", holder: multi, waiter: multi, members: multiMembers,
			breaker: func(t testing.TB, c *Client, name string) forceUnlocker {
				return mustMutex(t, c, multiMembers(name)[0])
			}},
		{name: "RedLock", holder: red, waiter: red, polls: true},
	}
}

// must returns v, or fails the test given to the returned function if err
// is not nil: must(NewX(...))(t).
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestTopologyKinds runs the core behaviour of every lock kind through a
// redis.ClusterClient and a Sentinel failover client: exclusion across
// Clients, reentrancy, a waiter woken by the unlock message (sharded
// pub/sub on the cluster) long before the holder's lease would have run
// out, every key of a lock in the lock's slot on the node serving it,
// watchdog renewal past the lease, and the lost-lock notice.
func TestTopologyKinds(t *testing.T) {
	for _, tp := range []topology{clusterTopology(t), sentinelTopology(t)} {
		t.Run(tp.name, func(t *testing.T) {
			for _, kc := range topologyKinds() {
				t.Run(kc.name, func(t *testing.T) {
					t.Parallel()
					testTopologyKind(t, tp, kc)
				})
			}
		})
	}
}

func testTopologyKind(t *testing.T, tp topology, kc kindCase) {
	ctx := context.Background()
	name := topoName(t, tp)
	members := []string{name}
	if kc.members != nil {
		members = kc.members(name)
	}
	a := newClient(t, tp.redis(t))
	b := newClient(t, tp.redis(t))
	// A lease far longer than the test: if the waiter gets in quickly, the
	// unlock message woke it, not the lease running out. (A RedLock waiter
	// polls every few milliseconds instead.)
	const lease = 30 * time.Second
	ha := kc.holder(t, a, name, WithLease(lease))
	hb := kc.waiter(t, b, name, WithLease(lease))

	la := mustLock(t, ctx, ha)
	la2 := mustLock(t, la, ha) // reentry: it would wait for itself otherwise
	if hc, ok := ha.(holdCounter); ok {
		if n, err := hc.HoldCount(la); err != nil || n != 2 {
			t.Fatalf("HoldCount after reentry = %d, %v; want 2", n, err)
		}
	}
	if err := ha.Unlock(la2); err != nil {
		t.Fatal(err)
	}
	if _, err := hb.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock of a held lock from another Client: %v, want ErrNotObtained", err)
	}

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := lockAsync(wctx, hb)
	if !kc.polls {
		eventually(t, 10*time.Second, func() error { return checkSubscribed(ctx, tp, name) })
	}
	for _, m := range members {
		checkOneSlot(t, ctx, tp, m)
	}

	released := time.Now()
	if err := ha.Unlock(la); err != nil {
		t.Fatal(err)
	}
	lb := await(t, got, 10*time.Second, "waiter after the unlock")
	t.Logf("%s %s: waiter got the lock %v after the unlock", tp.name, kc.name, time.Since(released).Round(time.Millisecond))
	if err := hb.Unlock(lb); err != nil {
		t.Fatal(err)
	}

	// Watchdog: a lock taken without a lease outlives its first lease and
	// is reported lost when someone deletes it.
	w := newClient(t, tp.redis(t), WithWatchdogTimeout(time.Second))
	hw := kc.holder(t, w, name)
	lw := mustLock(t, ctx, hw)
	time.Sleep(1500 * time.Millisecond)
	if lw.Err() != nil {
		t.Fatalf("lock lost after 1.5 leases: %v", context.Cause(lw))
	}
	if hc, ok := hw.(holdCounter); ok {
		if n, err := hc.HoldCount(lw); err != nil || n != 1 {
			t.Fatalf("after 1.5 leases: HoldCount = %d, %v; want 1", n, err)
		}
	}
	var br forceUnlocker
	if kc.breaker != nil {
		br = kc.breaker(t, b, name)
	} else {
		br = kc.holder(t, b, name).(forceUnlocker)
	}
	if ok, err := br.ForceUnlock(ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	select {
	case <-lw.Done():
		if !errors.Is(context.Cause(lw), ErrLockLost) {
			t.Fatalf("lock context ended with %v, want ErrLockLost", context.Cause(lw))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told within 5s that its lock was deleted")
	}
}

// checkSubscribed returns nil once some node has a subscriber on a channel
// of the lock; on a cluster it must be a sharded subscription on a node of
// the lock's shard, and no classic one anywhere.
func checkSubscribed(ctx context.Context, tp topology, name string) error {
	var classic, sharded []string
	for _, n := range tp.nodes() {
		for cmd, into := range map[string]*[]string{"CHANNELS": &classic, "SHARDCHANNELS": &sharded} {
			v, err := n.Do(ctx, "PUBSUB", cmd, "*"+name+"*")
			if err != nil {
				return err
			}
			if chans, _ := v.([]any); len(chans) > 0 {
				*into = append(*into, n.Addr())
			}
		}
	}
	switch {
	case tp.name == "cluster" && len(classic) > 0:
		return fmt.Errorf("classic subscription on %v; want sharded only", classic)
	case tp.name == "cluster" && len(sharded) == 0:
		return errors.New("no sharded subscription yet")
	case tp.name != "cluster" && len(classic) == 0:
		return errors.New("no subscription yet")
	}
	return nil
}

// checkOneSlot checks, on a cluster, that every key of the lock is in the
// lock's slot and stored on the master serving it.
func checkOneSlot(t *testing.T, ctx context.Context, tp topology, name string) {
	t.Helper()
	if tp.name != "cluster" {
		return
	}
	cl := sharedCluster(t)
	owner := cl.MasterFor(name)
	var found []string
	for _, n := range tp.nodes() {
		if n == owner || cl.ReplicaOf(ctx, owner) == n {
			for _, k := range nodeKeys(ctx, n, name) {
				found = append(found, k.(string))
			}
			continue
		}
		if keys := nodeKeys(ctx, n, name); len(keys) > 0 {
			t.Errorf("keys of %q on %s, which does not serve its slot: %v", name, n.Addr(), keys)
		}
	}
	if len(found) == 0 {
		t.Fatalf("no keys of %q on %s", name, owner.Addr())
	}
	for _, k := range slices.Compact(slices.Sorted(slices.Values(found))) {
		if s := slot(k); s != slot(name) {
			t.Errorf("key %q is in slot %d, the lock in %d", k, s, slot(name))
		}
	}
}
