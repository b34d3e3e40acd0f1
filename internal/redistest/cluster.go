package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

const (
	// clusterSize is the number of nodes: 3 masters with 1 replica each.
	clusterSize = 6
	// clusterSlots is the number of hash slots in Redis Cluster.
	clusterSlots = 16384
	// clusterReadyTimeout bounds how long the cluster may take to settle.
	clusterReadyTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster of three masters with one replica each, all
// separate redis-server processes on loopback.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts six cluster-enabled nodes, joins them with
// `redis-cli --cluster create --cluster-replicas 1` and waits until every
// node reports cluster_state:ok, every replica is in sync with its master and
// all nodes agree on who serves which slots. The caller must Close it.
func StartCluster() (*Cluster, error) {
	cli, err := redisserver.LookPath("redis-cli")
	if err != nil {
		return nil, err
	}
	nodes, err := redisserver.StartMany(clusterSize, func(int) (*Server, error) {
		return startProcess("redis-server", func(dir string, port int) ([]string, error) {
			// The bus port defaults to port+10000, which may be taken or
			// even beyond 65535, so pick it explicitly. CLUSTER SLOTS lists
			// a replica only once its replication offset is non-zero, which
			// on an idle master takes one replica ping period (10s by
			// default), hence the short period.
			bus, err := redisserver.FreePort()
			if err != nil {
				return nil, err
			}
			return serverArgs(dir, port,
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000",
				"--repl-ping-replica-period", "1",
				"--cluster-port", strconv.Itoa(bus),
			), nil
		})
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: nodes}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := waitUntil(context.Background(), clusterReadyTimeout, "cluster", c.check); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// NewCluster is StartCluster for tests: it fails tb on error and closes the
// cluster when the test ends.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := StartCluster()
	return must(tb, c, err)
}

// Nodes returns all six nodes, masters and replicas, in no particular order.
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs returns the addresses of all six nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client seeded with all node
// addresses. The caller must close it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// MasterFor returns the node that currently serves key's hash slot, as seen
// by the first node that answers CLUSTER KEYSLOT and CLUSTER SLOTS, or nil if
// no node answers.
func (c *Cluster) MasterFor(key string) *Server {
	for _, n := range c.nodes {
		if master := c.masterFor(n, key); master != nil {
			return master
		}
	}
	return nil
}

// masterFor asks node n which node serves key.
func (c *Cluster) masterFor(n *Server, key string) *Server {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	client := n.AdminClient()
	defer client.Close()
	slot, err := client.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil
	}
	//lint:ignore SA1019 CLUSTER SLOTS answers on every Redis the tests run; its ranges are what this reads.
	ranges, err := client.ClusterSlots(ctx).Result()
	if err != nil {
		return nil
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return c.node(r.Nodes[0].Addr)
		}
	}
	return nil
}

// node returns the node with the given address, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Close closes all nodes.
func (c *Cluster) Close() error { return redisserver.CloseAll(c.nodes) }

// check returns nil once every node reports cluster_state:ok, every replica
// has master_link_status:up and all nodes report the same complete slot map
// with one replica per slot range.
func (c *Cluster) check(ctx context.Context) error {
	var first string
	for _, n := range c.nodes {
		slots, err := checkClusterNode(ctx, n)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Addr(), err)
		}
		if first == "" {
			first = slots
		} else if slots != first {
			return fmt.Errorf("nodes disagree on slots:\n%s\n%s", first, slots)
		}
	}
	return nil
}

// checkClusterNode checks one node and returns its view of the slot map in
// a canonical form.
func checkClusterNode(ctx context.Context, n *Server) (string, error) {
	client := n.AdminClient()
	defer client.Close()
	info, err := client.ClusterInfo(ctx).Result()
	if err != nil {
		return "", err
	}
	if state, _ := redisserver.InfoField(info, "cluster_state"); state != "ok" {
		return "", fmt.Errorf("cluster_state:%s", state)
	}
	repl, err := client.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	if role, _ := redisserver.InfoField(repl, "role"); role == "slave" {
		if link, _ := redisserver.InfoField(repl, "master_link_status"); link != "up" {
			return "", fmt.Errorf("master_link_status:%s", link)
		}
	}
	//lint:ignore SA1019 CLUSTER SLOTS answers on every Redis the tests run; its ranges are what this reads.
	ranges, err := client.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	slices.SortFunc(ranges, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var b strings.Builder
	covered := 0
	for _, r := range ranges {
		if len(r.Nodes) != 2 {
			return "", fmt.Errorf("slots %d-%d have %d nodes, want master and replica", r.Start, r.End, len(r.Nodes))
		}
		covered += r.End - r.Start + 1
		fmt.Fprintf(&b, "%d-%d:%s,%s ", r.Start, r.End, r.Nodes[0].Addr, r.Nodes[1].Addr)
	}
	if covered != clusterSlots {
		return "", fmt.Errorf("%d of %d slots covered", covered, clusterSlots)
	}
	return b.String(), nil
}
