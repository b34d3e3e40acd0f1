package verify

// The matrix `make verify` runs, and the smoke of it that `go test` runs.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Matrix returns the scenarios of `make verify`: about 30 minutes on two
// cores.
func Matrix() []Scenario {
	const single, sentinel = 30 * time.Second, 45 * time.Second
	var m []Scenario
	add := func(topo string, sync bool, fault, work, broken string, d time.Duration) {
		m = append(m, Scenario{Topo: topo, ReplicaSync: sync, Fault: fault, Workload: work, Broken: broken, Duration: d})
	}
	for _, work := range []string{WorkMutex, WorkRW, WorkSem} {
		add(TopoSingle, false, FaultNone, work, BrokenNone, single)
		add(TopoSingle, false, FaultOverrun, work, BrokenNone, single)
		add(TopoSingle, false, FaultOverrun, work, BrokenIgnoreLost, single)
	}
	add(TopoSingle, false, FaultPauseHolder, WorkMutex, BrokenNone, single)
	add(TopoSingle, false, FaultPauseHolder, WorkMutex, BrokenUnfenced, single)
	add(TopoSingle, false, FaultKillMaster, WorkMutex, BrokenNone, single)
	add(TopoSingle, false, FaultPartitionMinority, WorkMutex, BrokenNone, single)
	for _, sync := range []bool{false, true} {
		for _, f := range []string{FaultPartitionMinority, FaultPartitionReplicas, FaultPauseMaster, FaultKillMaster} {
			add(TopoSentinel, sync, f, WorkMutex, BrokenNone, sentinel)
		}
	}
	// Holds of 8 s, the holder cut off with the master: its renewals on
	// the old master are not waited for, with or without replica sync.
	for _, sync := range []bool{false, true} {
		m = append(m, Scenario{Topo: TopoSentinel, ReplicaSync: sync, Fault: FaultPartitionHolderMinority,
			Workload: WorkMutex, Hold: 8 * time.Second, Duration: sentinel})
	}
	// A Cluster of three shards: the faults aim at the lock's master, and
	// the other masters' majority promotes its replica.
	for _, f := range []string{FaultPartitionMinority, FaultPauseMaster, FaultKillMaster} {
		add(TopoCluster, false, f, WorkMutex, BrokenNone, sentinel)
	}
	add(TopoCluster, true, FaultPartitionMinority, WorkMutex, BrokenNone, sentinel)
	m = append(m, Scenario{Topo: TopoCluster, Fault: FaultPartitionHolderMinority,
		Workload: WorkMutex, Hold: 8 * time.Second, Duration: sentinel})
	add(TopoSentinel, false, FaultPartitionMinority, WorkRW, BrokenNone, sentinel)
	add(TopoSentinel, false, FaultPartitionMinority, WorkSem, BrokenNone, sentinel)
	// A client's wall clock jumps ahead: of all dlock's primitives only
	// the permit semaphore reads it (internal/clock), and sends it to
	// scripts that run on the server's clock since finding 7's fix.
	add(TopoSingle, false, FaultClockJump, WorkSem, BrokenNone, single)
	// The fair lock, whose unlock hands the lock over to the head waiter
	// by message where PUBLISH counts its receivers (one server, and a
	// Cluster's sharded pub/sub, which Redis 7 gives; not with replica
	// sync): its waiters frozen past the hand-over's lease, next to the
	// client that takes a stale hand-over message for a grant, and the
	// Mutex's pause and partitions.
	add(TopoSingle, false, FaultNone, WorkFair, BrokenNone, single)
	add(TopoSingle, false, FaultPauseWaiter, WorkFair, BrokenNone, single)
	add(TopoSingle, false, FaultPauseWaiter, WorkFair, BrokenHandOverNoSeq, single)
	add(TopoSingle, false, FaultPauseHolder, WorkFair, BrokenNone, single)
	add(TopoSingle, false, FaultPartitionMinority, WorkFair, BrokenNone, single)
	add(TopoSentinel, false, FaultPartitionMinority, WorkFair, BrokenNone, sentinel)
	add(TopoCluster, false, FaultPartitionMinority, WorkFair, BrokenNone, sentinel)
	return m
}

// Smoke returns the short version that `go test` runs (about three
// minutes): the negative controls of the counter, the linearizability
// check and the fenced register next to their correct clients, one
// Sentinel partition, and the fair lock's waiters frozen past a
// hand-over, next to the client that takes a late hand-over for a grant.
func Smoke() []Scenario {
	return []Scenario{
		{Topo: TopoSingle, Fault: FaultOverrun, Workload: WorkMutex, Duration: 12 * time.Second},
		{Topo: TopoSingle, Fault: FaultOverrun, Workload: WorkMutex, Broken: BrokenIgnoreLost, Duration: 12 * time.Second},
		{Topo: TopoSingle, Fault: FaultPauseHolder, Workload: WorkMutex, Duration: 22 * time.Second},
		{Topo: TopoSingle, Fault: FaultPauseHolder, Workload: WorkMutex, Broken: BrokenUnfenced, Duration: 22 * time.Second},
		{Topo: TopoSentinel, Fault: FaultPartitionMinority, Workload: WorkMutex, Duration: 20 * time.Second},
		{Topo: TopoSingle, Fault: FaultPauseWaiter, Workload: WorkFair, Duration: 22 * time.Second},
		{Topo: TopoSingle, Fault: FaultPauseWaiter, Workload: WorkFair, Broken: BrokenHandOverNoSeq, Duration: 22 * time.Second},
	}
}

// RunAll runs scenarios one after another, each in a directory of its own
// under dir, and calls done with each result. A run that fails is in the
// results with its error.
func RunAll(ctx context.Context, scenarios []Scenario, dir string, done func(Result)) []Result {
	var out []Result
	for i, sc := range scenarios {
		d := filepath.Join(dir, fmt.Sprintf("run%02d", i+1))
		res, err := Run(ctx, sc, mkdir(d))
		if err != nil {
			res.Err = err.Error()
		}
		if b, err := json.MarshalIndent(res, "", "  "); err == nil {
			os.WriteFile(filepath.Join(d, "result.json"), b, 0o644)
		}
		done(res)
		out = append(out, res)
	}
	return out
}

func mkdir(d string) string {
	os.MkdirAll(d, 0o755)
	return d
}

// ControlCaught reports whether the checkers caught a broken client's run:
// an ignore-lost client must make the history non-linearizable (and lose
// counter increments, where it writes the counter); an unfenced register
// must accept stale writes; a fair lock client that takes a stale
// hand-over message for a grant must make the history non-linearizable.
// It is true for a correct client's run.
func (r Result) ControlCaught() bool {
	switch r.Broken {
	case BrokenIgnoreLost:
		writes := r.Workload == WorkMutex || r.Workload == WorkRW
		return r.Verdict == "Illegal" && r.DoubleGrants > 0 && (!writes || r.LostUpdates > 0)
	case BrokenUnfenced:
		return r.StaleAccepted > 0
	case BrokenHandOverNoSeq:
		return r.Verdict == "Illegal" && r.DoubleGrants > 0
	}
	return true
}
