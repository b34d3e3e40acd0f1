package verify

// The Cluster topology: three masters with one replica each, every
// redis-server in its own namespace, the slots split in three ranges. The
// lock's keys all hash to one slot ("verify-lock", or {verify-lock} in a
// hash tag), so its master is one of the three and the faults aim at it;
// the other two masters are what lets the cluster's majority promote the
// victim's replica when it is cut off or stopped.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// clusterShards is the number of masters of the Cluster topology, each
// with one replica.
const clusterShards = 3

// lockName is the lock every worker takes; its slot decides the master
// the faults aim at.
const lockName = "verify-lock"

// startCluster starts the Cluster topology's servers (masters first,
// then one replica per master) and joins them: slots, CLUSTER MEET, then
// CLUSTER REPLICATE. It returns once the cluster is healthy.
func (t *Topology) startCluster(ctx context.Context) error {
	t.cluster = true
	for i := range 2 * clusterShards {
		p, err := t.startRedis(ctx, fmt.Sprintf("r%d", i), "")
		if err != nil {
			return err
		}
		t.Servers = append(t.Servers, p)
	}
	const slots = 16384
	for i, m := range t.Servers[:clusterShards] {
		from, to := i*slots/clusterShards, (i+1)*slots/clusterShards-1
		if _, err := t.do(ctx, m.Addr(redisPort), "CLUSTER", "ADDSLOTSRANGE", from, to); err != nil {
			return fmt.Errorf("dlock/verify: slots of %s: %w", m.Node.Name, err)
		}
	}
	for _, p := range t.Servers[1:] {
		if _, err := t.do(ctx, t.Servers[0].Addr(redisPort), "CLUSTER", "MEET", p.Node.Addr, redisPort); err != nil {
			return fmt.Errorf("dlock/verify: meet %s: %w", p.Node.Name, err)
		}
	}
	for i, r := range t.Servers[clusterShards:] {
		m := t.Servers[i]
		id, err := t.do(ctx, m.Addr(redisPort), "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		// The replica must have heard of its master first.
		err = poll(ctx, 30*time.Second, func() error {
			_, err := t.do(ctx, r.Addr(redisPort), "CLUSTER", "REPLICATE", id)
			return err
		})
		if err != nil {
			return fmt.Errorf("dlock/verify: %s replicating %s: %w", r.Node.Name, m.Node.Name, err)
		}
	}
	return t.WaitHealthy(ctx, 60*time.Second)
}

// clusterArgs are the redis-server arguments of a cluster node: a node
// that misses others for a second is suspected, and a replica takes over
// soon after.
func clusterArgs() []string {
	return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000"}
}

// clusterMaster returns the master of the lock's slot as the servers that
// answer agree on it; at least half of them must answer (a stopped or
// killed master does not).
func (t *Topology) clusterMaster(ctx context.Context) (*Proc, error) {
	v, err := t.firstAnswer(ctx, "CLUSTER", "KEYSLOT", lockName)
	if err != nil {
		return nil, err
	}
	slot, _ := v.(int64)
	var addr string
	answered := 0
	for _, p := range t.Servers {
		v, err := t.do(ctx, p.Addr(redisPort), "CLUSTER", "NODES")
		if err != nil {
			continue
		}
		answered++
		a, err := slotMaster(fmt.Sprint(v), slot)
		if err != nil {
			return nil, fmt.Errorf("dlock/verify: %s: %w", p.Node.Name, err)
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("dlock/verify: cluster nodes disagree on the master of slot %d: %s, %s", slot, addr, a)
		}
		addr = a
	}
	if 2*answered < len(t.Servers) {
		return nil, fmt.Errorf("dlock/verify: %d of %d cluster nodes answer", answered, len(t.Servers))
	}
	for _, p := range t.Servers {
		if p.Node.Addr == addr {
			return p, nil
		}
	}
	return nil, fmt.Errorf("dlock/verify: master %s is no server of ours", addr)
}

// firstAnswer runs a command on the first server that answers.
func (t *Topology) firstAnswer(ctx context.Context, args ...any) (any, error) {
	var errs []error
	for _, p := range t.Servers {
		v, err := t.do(ctx, p.Addr(redisPort), args...)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// slotMaster returns the address (without port) of the master that
// serves slot in a CLUSTER NODES reply: a node flagged master, not
// failed, whose slot ranges hold slot.
func slotMaster(nodes string, slot int64) (string, error) {
	for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.ParseInt(lo, 10, 64)
			b, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				host, _, _ := strings.Cut(f[1], ":")
				return host, nil
			}
		}
	}
	return "", fmt.Errorf("no healthy master serves slot %d", slot)
}

// clusterHealthy checks that every server says the cluster is ok, that
// they agree on the lock's master, and that there are clusterShards
// masters each with a connected replica caught up with it.
func (t *Topology) clusterHealthy(ctx context.Context) error {
	for _, p := range t.Servers {
		v, err := t.do(ctx, p.Addr(redisPort), "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if !strings.Contains(fmt.Sprint(v), "cluster_state:ok") {
			return fmt.Errorf("%s: cluster state not ok", p.Node.Name)
		}
	}
	if _, err := t.clusterMaster(ctx); err != nil {
		return err
	}
	offsets := map[string]int64{} // master address → its offset
	type replica struct {
		name, master string
		offset       int64
	}
	var replicas []replica
	for _, p := range t.Servers {
		v, err := t.do(ctx, p.Addr(redisPort), "ROLE")
		if err != nil {
			return err
		}
		r, ok := v.([]any)
		switch {
		case ok && len(r) >= 3 && r[0] == "master":
			offsets[p.Node.Addr], _ = r[1].(int64)
		case ok && len(r) >= 5 && r[0] == "slave" && r[3] == "connected":
			off, _ := r[4].(int64)
			replicas = append(replicas, replica{p.Node.Name, fmt.Sprint(r[1]), off})
		default:
			return fmt.Errorf("%s: ROLE %v", p.Node.Name, v)
		}
	}
	if len(offsets) != clusterShards || len(replicas) != clusterShards {
		return fmt.Errorf("%d masters and %d connected replicas, want %d each", len(offsets), len(replicas), clusterShards)
	}
	for _, r := range replicas {
		off, ok := offsets[r.master]
		if !ok {
			return fmt.Errorf("%s replicates %s, not a master", r.name, r.master)
		}
		if r.offset < off {
			return fmt.Errorf("%s: offset %d behind %d", r.name, r.offset, off)
		}
	}
	return nil
}

// ClusterAddrs returns the cluster nodes' addresses, for the workers'
// cluster clients.
func (t *Topology) ClusterAddrs() []string {
	var out []string
	for _, p := range t.Servers {
		out = append(out, p.Addr(redisPort))
	}
	return out
}
