package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/redisserver"
)

// Fault injection and slot moves on a running Cluster or Sentinel setup.
// Each operation leaves the topology usable by later tests: WaitHealthy
// waits for the steady state StartCluster reaches.

// WaitHealthy waits until every node reports cluster_state:ok, every
// replica is in sync and all nodes agree on a complete slot map with one
// replica per range, as after StartCluster, and then until every master's
// replicas acknowledge its writes again (WaitCaughtUp). Use it after a
// failover or a slot move, before the next test.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	if err := waitUntil(ctx, clusterReadyTimeout, "cluster", c.check); err != nil {
		return err
	}
	for _, m := range c.Masters(ctx) {
		if err := WaitCaughtUp(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// WaitCaughtUp waits until master has at least one replica and every
// replica has acknowledged everything master had written when
// WaitCaughtUp was called. A replica's link can be up (master_link_status)
// while the master does not stream to it yet: after a full sync, Redis
// streams only once the replica's first acknowledgement arrived, and WAIT
// counts nothing until then.
func WaitCaughtUp(ctx context.Context, master *Server) error {
	v, err := master.Do(ctx, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("redistest: INFO on %s: %w", master.Addr(), err)
	}
	off, _ := redisserver.InfoField(v.(string), "master_repl_offset")
	target, _ := strconv.ParseInt(off, 10, 64)
	return waitUntil(ctx, clusterReadyTimeout, "replicas caught up", func(ctx context.Context) error {
		v, err := master.Do(ctx, "INFO", "replication")
		if err != nil {
			return err
		}
		text := v.(string)
		n, _ := redisserver.InfoField(text, "connected_slaves")
		if n == "" || n == "0" {
			return fmt.Errorf("%s has no replica", master.Addr())
		}
		for i := 0; ; i++ {
			line, ok := redisserver.InfoField(text, fmt.Sprintf("slave%d", i))
			if !ok {
				return nil
			}
			fields := map[string]string{}
			for _, kv := range strings.Split(line, ",") {
				k, v, _ := strings.Cut(kv, "=")
				fields[k] = v
			}
			acked, _ := strconv.ParseInt(fields["offset"], 10, 64)
			if fields["state"] != "online" || acked < target {
				return fmt.Errorf("replica %s:%s of %s: state=%s acknowledged %d of %d",
					fields["ip"], fields["port"], master.Addr(), fields["state"], acked, target)
			}
		}
	})
}

// NodeID returns n's cluster node id.
func (c *Cluster) NodeID(ctx context.Context, n *Server) (string, error) {
	id, err := n.Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER MYID on %s: %w", n.Addr(), err)
	}
	s, _ := id.(string)
	return s, nil
}

// Masters returns the nodes that currently report role master.
func (c *Cluster) Masters(ctx context.Context) []*Server {
	var masters []*Server
	for _, n := range c.nodes {
		if role(ctx, n) == "master" {
			masters = append(masters, n)
		}
	}
	return masters
}

// ReplicaOf returns the node that replicates master, or nil.
func (c *Cluster) ReplicaOf(ctx context.Context, master *Server) *Server {
	for _, n := range c.nodes {
		info, err := n.Do(ctx, "INFO", "replication")
		if err != nil {
			continue
		}
		text, _ := info.(string)
		if r, _ := redisserver.InfoField(text, "role"); r != "slave" {
			continue
		}
		if port, _ := redisserver.InfoField(text, "master_port"); port == fmt.Sprint(master.Port()) {
			return n
		}
	}
	return nil
}

// KeySlot returns key's hash slot.
func (c *Cluster) KeySlot(ctx context.Context, key string) (int, error) {
	for _, n := range c.nodes {
		if v, err := n.Do(ctx, "CLUSTER", "KEYSLOT", key); err == nil {
			slot, _ := v.(int64)
			return int(slot), nil
		}
	}
	return 0, errors.New("redistest: no node answers CLUSTER KEYSLOT")
}

// BeginMigration marks slot as migrating from one master to another
// (CLUSTER SETSLOT IMPORTING on to, MIGRATING on from), the first step of a
// reshard. Until FinishMigration, from answers ASK for the slot's missing
// keys and to serves them only after ASKING.
func (c *Cluster) BeginMigration(ctx context.Context, slot int, from, to *Server) error {
	fromID, err := c.NodeID(ctx, from)
	if err != nil {
		return err
	}
	toID, err := c.NodeID(ctx, to)
	if err != nil {
		return err
	}
	if _, err := to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("redistest: SETSLOT %d IMPORTING: %w", slot, err)
	}
	if _, err := from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID); err != nil {
		return fmt.Errorf("redistest: SETSLOT %d MIGRATING: %w", slot, err)
	}
	return nil
}

// MigrateKeys moves every key of slot from one master to the other with
// MIGRATE, as redis-cli --cluster reshard does. The slot must be migrating.
func (c *Cluster) MigrateKeys(ctx context.Context, slot int, from, to *Server) error {
	for {
		v, err := from.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100)
		if err != nil {
			return fmt.Errorf("redistest: GETKEYSINSLOT %d: %w", slot, err)
		}
		keys, _ := v.([]any)
		if len(keys) == 0 {
			return nil
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port(), "", 0, 5000, "REPLACE", "KEYS"}
		args = append(args, keys...)
		if _, err := from.Do(ctx, args...); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("redistest: MIGRATE slot %d: %w", slot, err)
		}
	}
}

// FinishMigration assigns slot to the master to on every master (CLUSTER
// SETSLOT NODE), ending a migration. The old owner must hold no keys of
// the slot any more.
func (c *Cluster) FinishMigration(ctx context.Context, slot int, from, to *Server) error {
	toID, err := c.NodeID(ctx, to)
	if err != nil {
		return err
	}
	// The new owner first, then the old one, then the others: the order
	// redis-cli uses, so that no node points back at the old owner.
	order := []*Server{to, from}
	for _, m := range c.Masters(ctx) {
		if m != to && m != from {
			order = append(order, m)
		}
	}
	for _, n := range order {
		if _, err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID); err != nil {
			return fmt.Errorf("redistest: SETSLOT %d NODE on %s: %w", slot, n.Addr(), err)
		}
	}
	return nil
}

// MoveSlot moves slot with its keys from one master to another while the
// cluster serves it: a live reshard of one slot.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, from, to *Server) error {
	if err := c.BeginMigration(ctx, slot, from, to); err != nil {
		return err
	}
	if err := c.MigrateKeys(ctx, slot, from, to); err != nil {
		return err
	}
	return c.FinishMigration(ctx, slot, from, to)
}

// CutOffReplicas makes master's replicas lose their link and unable to get
// it back, so that writes from then on reach only master: the replicas
// cannot authenticate replication (ACL SETUSER default -psync -sync) and are
// disconnected (CLIENT KILL TYPE replica). The master still counts as
// healthy to a cluster or to sentinels for a while. RestoreReplicas undoes it.
func CutOffReplicas(ctx context.Context, master *Server) error {
	if _, err := master.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync"); err != nil {
		return fmt.Errorf("redistest: ACL SETUSER on %s: %w", master.Addr(), err)
	}
	if _, err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		return fmt.Errorf("redistest: CLIENT KILL TYPE replica on %s: %w", master.Addr(), err)
	}
	return nil
}

// RestoreReplicas gives the default user back the replication commands
// CutOffReplicas took and, if n is a master, waits until its replicas
// acknowledge its writes again. PSYNC comes back first and SYNC only then:
// a replica refused PSYNC falls back to the legacy SYNC, and one that got
// in that way treats its master as unable to take acknowledgements, so WAIT
// would never count it.
func RestoreReplicas(ctx context.Context, n *Server) error {
	if _, err := n.Do(ctx, "ACL", "SETUSER", "default", "+psync"); err != nil {
		return fmt.Errorf("redistest: ACL SETUSER on %s: %w", n.Addr(), err)
	}
	if role(ctx, n) == "master" {
		if err := WaitCaughtUp(ctx, n); err != nil {
			return err
		}
	}
	if _, err := n.Do(ctx, "ACL", "SETUSER", "default", "+sync"); err != nil {
		return fmt.Errorf("redistest: ACL SETUSER on %s: %w", n.Addr(), err)
	}
	return nil
}

// role returns the ROLE a node reports ("master", "slave", "sentinel"), or
// "" if it does not answer.
func role(ctx context.Context, n *Server) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := n.Do(ctx, "ROLE")
	if r, ok := v.([]any); err == nil && ok && len(r) > 0 {
		s, _ := r[0].(string)
		return s
	}
	return ""
}

// AwaitNewMaster waits until every sentinel reports a master other than old
// and that node answers ROLE as master: the end of a failover the sentinels
// started on their own, such as after Pause or Kill of the master. It
// returns the new master.
func (s *Sentinel) AwaitNewMaster(ctx context.Context, old *Server) (*Server, error) {
	var master *Server
	err := waitUntil(ctx, sentinelReadyTimeout, "failover", func(ctx context.Context) error {
		for _, n := range s.sentinels {
			addr, err := s.masterAddr(ctx, n)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", n.Addr(), err)
			}
			if addr == old.Addr() {
				return fmt.Errorf("sentinel %s still reports %s", n.Addr(), addr)
			}
			if master = s.server(addr); master == nil {
				return fmt.Errorf("sentinel %s reports unknown master %s", n.Addr(), addr)
			}
		}
		return checkRole(ctx, master, "master")
	})
	return master, err
}

// Rejoin makes old, a former master that runs again, a replica of the
// current master and waits until it is in sync: what the sentinels do on
// their own only about 10s after it comes back.
func (s *Sentinel) Rejoin(ctx context.Context, old *Server) error {
	master := s.Master()
	if master == nil || master == old {
		return errors.New("redistest: rejoin: no other master")
	}
	if _, err := old.Do(ctx, "REPLICAOF", "127.0.0.1", master.Port()); err != nil {
		return fmt.Errorf("redistest: REPLICAOF on %s: %w", old.Addr(), err)
	}
	if err := waitUntil(ctx, sentinelReadyTimeout, "old master sync", s.checkReplica); err != nil {
		return err
	}
	return WaitCaughtUp(ctx, master)
}
