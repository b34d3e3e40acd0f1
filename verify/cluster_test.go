package verify

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// TestClusterTopology: the Cluster topology comes up healthy with three
// shards, a dlock client on it takes the lock on the master of the lock's
// slot (where Master finds it), and killing that master makes its replica
// the master of the slot, after which the restarted server rejoins as a
// replica and the cluster is whole again.
func TestClusterTopology(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := NewNet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	topo, err := StartCluster(ctx, n, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	m, err := topo.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The test's process is outside the namespaces: its client dials
	// from the control node.
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: topo.ClusterAddrs(), Dialer: topo.Ctl.DialContext})
	defer cl.Close()
	locks, err := dlock.New(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	mu, _ := locks.NewMutex(lockName, dlock.WithFencing())
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := topo.do(ctx, m.Addr(redisPort), "EXISTS", lockName); err != nil || n != int64(1) {
		t.Errorf("the lock on %s, the slot's master: %v, %v; want it there", m.Node.Name, n, err)
	}
	if err := mu.Unlock(l); err != nil {
		t.Fatal(err)
	}

	if _, err := killMaster(ctx, topo, nil); err != nil {
		t.Fatal(err)
	}
	after, err := topo.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after == m {
		t.Errorf("%s is still the master of the lock's slot after it was killed", m.Node.Name)
	}
}
