package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Failovers during contention. Redis replicates asynchronously, so a
// failover can promote a replica that lacks the latest lock writes. After
// SENTINEL FAILOVER the old master serves its clients until they hear of
// the switch, and what they write there meanwhile (locks, fencing-token
// increments) is lost when it becomes a replica: clients that switch at
// different moments can hold the lock on both masters at once. (Tokens no
// longer go back: the server's clock is their floor.) Every hold writes
// the resource through dlock.FencedSet, and no stale write may be
// accepted, in any run. A frozen cluster master grants nothing, so there only
// writes not yet replicated when it froze are at risk. Without replica
// sync these runs may grant the lock twice: what the history checker finds
// is reported in the summary, not failed on. With WithReplicaSync(1, ...)
// an acquisition counts only once WAIT says a replica has it, which shuts
// out the old master once its replica is gone; but a replica that
// acknowledged can still lose the write, and renewals and releases are not
// waited for: WAIT narrows the window, it does not close it, so those runs
// may report violations too; over enough failovers (make soak) they must be
// none, or fewer per failover than without replica sync. Each topology is started once and serves both runs.

// failoverGap is the contention between two failovers.
const failoverGap = 500 * time.Millisecond

// minCompared is how many failovers each run needs before their double
// grants and token reversals are compared: with one or two (the short
// runs) either run may show a few or none by chance.
const minCompared = 10

// syncTimeout is WAIT's timeout in the replica sync runs: generous on a
// loaded machine, and below the workers' read timeout, as it must be.
const syncTimeout = time.Second

// failoverWorkload is contention(perOwner) for a topology. It is the same
// workload as the other scenarios: the double grants counted come from the
// failovers, not from a slower critical section.
func failoverWorkload(perOwner, replicaSync int) workerConfig {
	w := contention(perOwner)
	if replicaSync > 0 {
		w.ReplicaSync, w.ReplicaSyncTimeout = replicaSync, syncTimeout
	}
	return w
}

// syncNote is the notes column of a run.
func syncNote(replicaSync int) string {
	if replicaSync > 0 {
		return fmt.Sprintf("WithReplicaSync(%d, %v): WAIT narrows the failover window, it does not close it", replicaSync, syncTimeout)
	}
	return "no replica sync: asynchronous replication, double grants possible"
}

// failoverRuns runs sc without and with replica sync, with the faults of
// inject, and fails a run in which no failover completed: it would have
// tested nothing. Replica sync must earn its name: when both runs had at
// least minCompared failovers (make soak), the run with it must show no
// double grant or token reversal, or fewer per failover than the run
// without it.
func failoverRuns(t *testing.T, sc scenario, perOwner func() int, healthy func(ctx context.Context) error,
	inject func(ctx context.Context, lock string) error) {
	var runs [2]outcome // without, with replica sync
	for i, replicaSync := range []int{0, 1} {
		name := "without replica sync"
		if replicaSync > 0 {
			name = "with replica sync"
		}
		t.Run(name, func(t *testing.T) {
			if err := healthy(context.Background()); err != nil {
				t.Fatal(err)
			}
			sc := sc
			sc.name = fmt.Sprintf("%s, %s", sc.name, name)
			sc.worker = failoverWorkload(perOwner(), replicaSync)
			sc.unsafe = true
			sc.notes = syncNote(replicaSync)
			// The fault goroutine does not touch t: it may outlive a run
			// that failed, though run has waited for it when it returns.
			// The next run must not start during its last failover.
			var f faultLog
			done := make(chan struct{})
			sc.fault = func(ctx context.Context, _ *testing.T, _ *redistest.Server) int {
				defer close(done)
				f = failovers(ctx, func(ctx context.Context) error { return inject(ctx, "chaos:"+sc.name) })
				return len(f.took)
			}
			t.Cleanup(func() {
				select {
				case <-done:
				case <-time.After(time.Minute): // run failed before starting it
				}
			})
			runs[i] = run(t, sc)
			t.Logf("failovers took %v", f.took)
			if f.err != nil {
				t.Errorf("failover %d: %v", len(f.took)+1, f.err)
			}
			if len(f.took) == 0 {
				t.Error("the workers were done before the first failover: the run tested nothing")
			}
		})
	}
	without, with := runs[0], runs[1]
	bad := func(o outcome) int { return o.overlaps + o.reversals }
	t.Logf("double grants and token reversals: %d in %d failovers without replica sync, %d in %d with it",
		bad(without), without.faults, bad(with), with.faults)
	switch {
	case t.Failed() || bad(with) == 0:
	case min(without.faults, with.faults) < minCompared:
		t.Logf("too few failovers to compare the runs (fewer than %d); make soak compares them", minCompared)
	case bad(without) == 0:
		t.Errorf("with replica sync: %d double grants and token reversals in %d failovers, none without it", bad(with), with.faults)
	case float64(bad(with))/float64(max(with.faults, 1)) >= float64(bad(without))/float64(without.faults):
		t.Errorf("with replica sync: %d double grants and token reversals in %d failovers, not fewer than without it (%d in %d)",
			bad(with), with.faults, bad(without), without.faults)
	}
}

// faultLog is what failovers did: how long each completed failover took,
// and the error that stopped them, if any.
type faultLog struct {
	took []time.Duration
	err  error
}

// failovers calls inject every failoverGap until ctx ends or inject fails.
// A failover under way when ctx ends is seen through, so that the next run
// finds the topology healthy.
func failovers(ctx context.Context, inject func(ctx context.Context) error) faultLog {
	var f faultLog
	for {
		select {
		case <-ctx.Done():
			return f
		case <-time.After(failoverGap):
		}
		start := time.Now()
		if f.err = inject(context.WithoutCancel(ctx)); f.err != nil {
			return f
		}
		f.took = append(f.took, time.Since(start).Round(time.Millisecond))
	}
}

// TestSentinelFailovers: workers reach the lock through Sentinel while the
// test asks the sentinels for one failover after another (SENTINEL
// FAILOVER; the old master is made a replica of the new one at once).
func TestSentinelFailovers(t *testing.T) {
	ss := redistest.NewSentinel(t)
	sc := scenario{
		name:  "Sentinel failovers (SENTINEL FAILOVER)",
		procs: 3,
		connect: func(cfg *workerConfig) {
			cfg.SentinelMaster, cfg.SentinelAddrs = ss.MasterName(), ss.SentinelAddrs()
		},
		clean: func(t *testing.T, name string) {
			checkCleanTopology(t, name, ss.Master(), ss.Replica())
		},
	}
	healthy := func(ctx context.Context) error {
		if m := ss.Master(); m != nil {
			return redistest.WaitCaughtUp(ctx, m)
		}
		return errors.New("no sentinel knows the master")
	}
	failoverRuns(t, sc, func() int { return scale(150, 1500) }, healthy,
		func(ctx context.Context, _ string) error { return ss.Failover(ctx) })
}

// TestClusterFailovers: workers reach the lock through a cluster client
// while the test freezes the master of the lock's slot (SIGSTOP) until its
// replica is promoted, resumes it, and waits until it has rejoined as a
// replica and the cluster is healthy, again and again.
func TestClusterFailovers(t *testing.T) {
	cl := redistest.NewCluster(t)
	sc := scenario{
		name:  "Cluster failovers (slot master frozen until its replica is promoted)",
		procs: 3,
		connect: func(cfg *workerConfig) {
			cfg.ClusterAddrs = cl.Addrs()
		},
		clean: func(t *testing.T, name string) {
			checkCleanTopology(t, name, cl.Nodes()...)
		},
	}
	failoverRuns(t, sc, func() int { return scale(100, 2000) }, cl.WaitHealthy,
		func(ctx context.Context, lock string) error {
			// Found anew each time: the last failover moved the slot.
			master := cl.MasterFor(lock)
			if master == nil {
				return errors.New("no node knows the lock's master")
			}
			replica := cl.ReplicaOf(ctx, master)
			if replica == nil {
				return fmt.Errorf("master %s has no replica", master.Addr())
			}
			return freezeUntilPromoted(ctx, cl, master, replica)
		})
}

// freezeUntilPromoted freezes master until replica reports the master
// role, then resumes it and waits until the cluster is healthy again, the
// old master a synced replica of the new one.
func freezeUntilPromoted(ctx context.Context, cl *redistest.Cluster, master, replica *redistest.Server) error {
	master.Pause()
	err := awaitRole(ctx, replica, "master", 30*time.Second)
	master.Resume()
	if err != nil {
		return err
	}
	return cl.WaitHealthy(ctx)
}

// awaitRole polls n until it reports role (ROLE) or timeout passes.
func awaitRole(ctx context.Context, n *redistest.Server, role string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		short, cancel := context.WithTimeout(ctx, time.Second)
		v, err := n.Do(short, "ROLE")
		cancel()
		if r, ok := v.([]any); err == nil && ok && len(r) > 0 && r[0] == role {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not report role %s within %v (last: %v, %v)", n.Addr(), role, timeout, v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkCleanTopology is checkClean on a topology: no subscriber is left on
// the lock's channel, classic or sharded, on any node, and no lock key on
// any master (replicas mirror their masters, and answer key commands on a
// cluster only with MOVED).
func checkCleanTopology(t *testing.T, name string, nodes ...*redistest.Server) {
	t.Helper()
	ctx := context.Background()
	ch := "redisson_lock__channel:{" + name + "}"
	for _, n := range nodes {
		if n == nil {
			t.Error("a node of the topology is unknown")
			continue
		}
		for _, cmd := range []string{"NUMSUB", "SHARDNUMSUB"} {
			v, err := n.Do(ctx, "PUBSUB", cmd, ch)
			if r, ok := v.([]any); err != nil || !ok || len(r) != 2 || r[1] != int64(0) {
				t.Errorf("%s: PUBSUB %s %s: %v %v", n.Addr(), cmd, ch, v, err)
			}
		}
		role, err := n.Do(ctx, "ROLE")
		if r, ok := role.([]any); err == nil && ok && len(r) > 0 && r[0] == "master" {
			checkClean(t, n, name)
		}
	}
}
