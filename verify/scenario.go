package verify

// A scenario is one row of the matrix: a topology, a fault, a workload and
// a client (correct or broken). Run builds the network and the topology,
// starts the workers, injects the fault again and again while they run,
// heals, waits for the workers, and checks what they recorded.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// Topologies.
const (
	TopoSingle   = "single"   // one redis-server
	TopoSentinel = "sentinel" // a master, two replicas, three sentinels
	TopoCluster  = "cluster"  // three masters with a replica each
)

// Faults.
const (
	FaultNone = "none"
	// FaultOverrun: no outside fault; one hold in ten outlasts its fixed
	// lease (a slow critical section), and the lease runs out under it.
	FaultOverrun = "overrun"
	// FaultPartitionMinority cuts the master, one sentinel and client c1
	// off from everything else: a Sentinel majority promotes a replica
	// while c1 still talks to the old master.
	FaultPartitionMinority = "partition-master-minority"
	// FaultPartitionHolderMinority is FaultPartitionMinority with the
	// client that holds the lock, rather than c1, on the master's side.
	FaultPartitionHolderMinority = "partition-holder-minority"
	// FaultPartitionReplicas cuts the master off from its replicas only.
	FaultPartitionReplicas = "partition-master-replicas"
	// FaultPauseHolder freezes (SIGSTOP) the client process that holds
	// the lock for longer than the lease, then resumes it.
	FaultPauseHolder = "pause-holder"
	// FaultPauseWaiter (the fair workload only) freezes the client
	// process whose waiter heads the fair lock's queue while another
	// process holds the lock, for pauseWaiterFor, and holds back the
	// master's messages to it until its waiter has queued again:
	// the holder's unlock hands the lock over to the frozen waiter, that
	// hold runs out, another waiter takes the lock, and the frozen one
	// resumes, finds the lock taken, then reads the message of a
	// hand-over that has ended.
	FaultPauseWaiter = "pause-waiter"
	// FaultPauseMaster freezes the master past Sentinel's down-after, so a
	// replica is promoted, then resumes it.
	FaultPauseMaster = "pause-master"
	// FaultKillMaster kills the master with SIGKILL and starts it again
	// (empty: no persistence), after the failover when there is Sentinel.
	FaultKillMaster = "kill-master"
	// FaultClockJump moves client c1's wall clock, as dlock reads it
	// (internal/clock), ahead by clockJump for partitionFor, then back.
	FaultClockJump = "clock-jump"
)

// Timing of every run.
const (
	watchdog     = 2 * time.Second        // the watchdog timeout of every hold
	overrunLease = 500 * time.Millisecond // the fixed lease of FaultOverrun
	partitionFor = 8 * time.Second        // how long a partition lasts
	pauseFor     = 3 * watchdog           // a pause, past the lease
	settle       = 2 * time.Second        // contention between faults
	clockJump    = 5 * watchdog           // a client clock jump, past the lease
)

// Timing of FaultPauseWaiter. The pause outlasts the lease a hand-over
// sets (the watchdog timeout) and leaves another waiter time to take the
// lock, and ends well within the 5 s a worker's Lock waits: the frozen
// waiter's Lock is still waiting when it resumes and queues again.
const (
	pauseWaiterFor = watchdog + time.Second
	requeueWait    = 2 * time.Second // at most, for the resumed waiter to queue again
)

// Scenario is one run.
type Scenario struct {
	Topo        string
	ReplicaSync bool
	Fault       string
	Workload    string
	Broken      string
	Hold        time.Duration // the critical section; 0 for 5 ms
	Duration    time.Duration // of contention
}

// Name is the scenario's label in the table.
func (s Scenario) Name() string {
	b := s.Topo
	if s.Topo == TopoSentinel || s.Topo == TopoCluster {
		if s.ReplicaSync {
			b += "+sync"
		} else {
			b += " no sync"
		}
	}
	b += ", " + s.Fault + ", " + s.Workload
	if s.Hold != 0 {
		b += fmt.Sprintf(" (holds of %v)", s.Hold)
	}
	if s.Broken != "" {
		b += ", BROKEN client: " + s.Broken
	}
	return b
}

// Result is what a run found.
type Result struct {
	Scenario
	Acquisitions   int
	AcquireErrors  int
	DoubleGrants   int
	LongestOverlap time.Duration // the longest stretch in which conflicting holds were open
	Verdict        porcupine.CheckResult
	Increments     int // counter increments the workers saw succeed
	LostUpdates    int // increments minus the counter's final value
	StaleAttempted int // register writes with a stale token
	StaleAccepted  int // ... that the register accepted
	EqualTokens    int // stale writes with the last token, from another holder
	MaxUnavailable time.Duration
	Faults         int
	Notes          []string
	Err            string // the run's error, for the table
}

// client is one worker process.
type client struct {
	node *Node
	proc *Proc
	out  string
	res  bytes.Buffer
}

// Run runs sc with its own network and processes in dir, and removes them
// all before it returns, whatever happened.
func Run(ctx context.Context, sc Scenario, dir string) (res Result, err error) {
	res.Scenario = sc
	n, err := NewNet(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, n.Close()) }()
	replicas := 0
	if sc.Topo == TopoSentinel {
		replicas = 2
	}
	var topo *Topology
	if sc.Topo == TopoCluster {
		topo, err = StartCluster(ctx, n, dir)
	} else {
		topo, err = StartTopology(ctx, n, dir, replicas, sc.Topo == TopoSentinel)
	}
	if err != nil {
		return res, err
	}
	defer topo.Close()
	clients, err := startWorkers(ctx, sc, topo, dir)
	defer func() {
		for _, c := range clients {
			c.proc.Kill()
		}
	}()
	if err != nil {
		return res, err
	}
	until := time.Now().Add(sc.Duration)
	f := inject(ctx, sc, topo, clients, until)
	res.Faults, res.Notes = f.count, f.notes
	if f.err != nil {
		return res, fmt.Errorf("dlock/verify: fault %d: %w", f.count+1, f.err)
	}
	if err := awaitWorkers(clients, until.Add(90*time.Second)); err != nil {
		return res, err
	}
	return check(ctx, res, topo, clients)
}

// startWorkers starts three worker processes, each in its own namespace,
// running this executable again (WorkerMain), or the broken worker
// (workerBinary).
func startWorkers(ctx context.Context, sc Scenario, topo *Topology, dir string) ([]*client, error) {
	exe, err := workerBinary(ctx, sc, dir)
	if err != nil {
		return nil, err
	}
	until := Mono() + sc.Duration.Nanoseconds()
	var clients []*client
	for i := 1; i <= 3; i++ {
		nd, err := topo.Net.AddNode(ctx, "c"+strconv.Itoa(i))
		if err != nil {
			return clients, err
		}
		c := &client{node: nd, out: filepath.Join(dir, fmt.Sprintf("c%d.history", i))}
		cfg := WorkerConfig{ID: i, Out: c.out, Resource: topo.Resource.Addr(redisPort), Name: lockName,
			Workload: sc.Workload, Broken: sc.Broken, Goroutines: 2, Until: until,
			Watchdog: watchdog, Critical: 5 * time.Millisecond, ReplicaSync: sc.ReplicaSync}
		switch {
		case topo.cluster:
			cfg.Cluster = topo.ClusterAddrs()
		case len(topo.Sentinels) > 0:
			for _, s := range topo.Sentinels {
				cfg.Sentinels = append(cfg.Sentinels, s.Addr(sentinelPort))
			}
		default:
			cfg.LockAddr = topo.Servers[0].Addr(redisPort)
		}
		switch sc.Fault {
		case FaultOverrun:
			cfg.Lease, cfg.Overrun, cfg.OverrunOdds = overrunLease, 1200*time.Millisecond, 10
		case FaultClockJump:
			cfg.ClockJump = clockJump
		case FaultPauseHolder:
			// Most of a hold before the register write: a pause then
			// finds the holder before it, and the write goes out stale.
			cfg.Critical = 50 * time.Millisecond
		case FaultPauseWaiter:
			// A waiter that queues again has a few holds of 50 ms to
			// wait: its hand-over messages, held back until then, reach
			// it before its turn (pauseWaiter).
			cfg.Critical = 50 * time.Millisecond
		}
		if sc.Hold != 0 {
			cfg.Critical = sc.Hold
		}
		b, _ := json.Marshal(cfg)
		c.proc = &Proc{Node: nd, bin: exe, log: c.out + ".log",
			env: append(os.Environ(), workerEnv+"="+string(b)), stdout: &c.res}
		if err := c.proc.Start(); err != nil {
			return clients, err
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// workerBinary returns the executable that sc's workers run: this one,
// or for BrokenHandOverNoSeq this module's cmd/verify built with the tag
// brokenTag, into dir. That build needs the go command on PATH and the
// module's source: where this file was compiled, or else (a binary built
// with -trimpath, as make mutate builds them) the working directory, if
// it is verify/ (go test runs a package's tests there); the build cache
// makes it a link after the first time.
func workerBinary(ctx context.Context, sc Scenario, dir string) (string, error) {
	if sc.Broken != BrokenHandOverNoSeq {
		return os.Executable()
	}
	src, err := sourceDir()
	if err != nil {
		return "", fmt.Errorf("dlock/verify: the %s worker is built from verify/'s source: %w", sc.Broken, err)
	}
	out := filepath.Join(dir, "worker-"+brokenTag)
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", brokenTag, "-o", out, "./cmd/verify")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("dlock/verify: building the %s worker in %s: %w\n%s", sc.Broken, cmd.Dir, err, b)
	}
	return out, nil
}

// sourceDir returns verify/'s source directory: where this file was
// compiled, or the working directory when that holds this file.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok && filepath.IsAbs(file) {
		return filepath.Dir(file), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(wd, "scenario.go")); err != nil {
		return "", fmt.Errorf("this binary does not say where it was built (%q), and the working directory %s is not verify/", file, wd)
	}
	return wd, nil
}

// awaitWorkers waits until every worker has exited, or deadline.
func awaitWorkers(clients []*client, deadline time.Time) error {
	for _, c := range clients {
		select {
		case <-c.proc.exited():
		case <-time.After(time.Until(deadline)):
			return fmt.Errorf("dlock/verify: worker %s still running past its deadline", c.node.Name)
		}
	}
	return nil
}

// check reads the workers' histories and results and the resource, and
// fills in res.
func check(ctx context.Context, res Result, topo *Topology, clients []*client) (Result, error) {
	var paths []string
	for _, c := range clients {
		var wr WorkerResult
		if err := json.Unmarshal(c.res.Bytes(), &wr); err != nil {
			return res, fmt.Errorf("dlock/verify: worker %s: result %q: %w (see %s.log)", c.node.Name, c.res.String(), err, c.out)
		}
		res.Acquisitions += wr.Acquired
		res.AcquireErrors += wr.Errors
		res.Increments += wr.Increments
		paths = append(paths, c.out)
	}
	evs, err := ReadHistory(paths...)
	if err != nil {
		return res, err
	}
	ops, holds := Operations(evs)
	res.Verdict = Linearizable(ModelFor(res.Workload), ops, 2*time.Minute)
	res.DoubleGrants, res.LongestOverlap = DoubleGrants(res.Workload, holds)
	res.MaxUnavailable = MaxUnavailable(evs)

	rdb := topo.Client(topo.Resource.Addr(redisPort))
	defer rdb.Close()
	final, err := rdb.Get(ctx, counterKey).Int()
	if err != nil && res.Increments > 0 {
		return res, fmt.Errorf("dlock/verify: reading the counter: %w", err)
	}
	res.LostUpdates = max(0, res.Increments-final)
	reg, err := rdb.HGetAll(ctx, registerKey).Result()
	if err != nil {
		return res, fmt.Errorf("dlock/verify: reading the register: %w", err)
	}
	res.StaleAttempted, _ = strconv.Atoi(reg["stale_attempted"])
	res.StaleAccepted, _ = strconv.Atoi(reg["stale_accepted"])
	res.EqualTokens, _ = strconv.Atoi(reg["equal_attempted"])
	return res, nil
}

// faultOutcome is what inject did.
type faultOutcome struct {
	count int
	notes []string
	err   error
}

// inject injects sc's fault every settle until a whole fault no longer
// fits before until, healing after each and waiting for the topology to
// be whole again.
func inject(ctx context.Context, sc Scenario, topo *Topology, clients []*client, until time.Time) faultOutcome {
	var f faultOutcome
	fault := faultFunc(sc.Fault)
	if fault == nil {
		return f
	}
	for {
		select {
		case <-ctx.Done():
			f.err = ctx.Err()
			return f
		case <-time.After(settle):
		}
		if time.Until(until) < faultBudget(sc.Fault) {
			return f
		}
		note, err := fault(ctx, topo, clients)
		if note != "" {
			f.notes = append(f.notes, note)
		}
		if errors.Is(err, errNoTarget) {
			f.notes = append(f.notes, "no target: "+sc.Fault+" skipped")
			continue
		}
		if err != nil {
			f.err = err
			return f
		}
		f.count++
	}
}

// faultBudget is the time one fault needs, healing included.
func faultBudget(fault string) time.Duration {
	switch fault {
	case FaultPartitionMinority, FaultPartitionHolderMinority, FaultPartitionReplicas, FaultClockJump:
		return partitionFor + 6*time.Second
	case FaultPauseHolder:
		return pauseFor + 2*time.Second
	case FaultPauseWaiter:
		return pauseWaiterFor + requeueWait + 2*time.Second
	}
	return 8 * time.Second
}

// errNoTarget is a fault's error when what it aims at was not there (no
// waiter to freeze): the run goes on, and the table notes it.
var errNoTarget = errors.New("dlock/verify: the fault found no target")

type faultFn func(ctx context.Context, topo *Topology, clients []*client) (note string, err error)

func faultFunc(name string) faultFn {
	switch name {
	case FaultPartitionMinority:
		return partitionMinority
	case FaultPartitionHolderMinority:
		return partitionHolderMinority
	case FaultPartitionReplicas:
		return partitionReplicas
	case FaultPauseHolder:
		return pauseHolder
	case FaultPauseWaiter:
		return pauseWaiter
	case FaultPauseMaster:
		return pauseMaster
	case FaultKillMaster:
		return killMaster
	case FaultClockJump:
		return jumpClock
	}
	return nil
}

// partitionMinority cuts {master, s1, c1} off from the rest for
// partitionFor, then heals and waits for the topology.
func partitionMinority(ctx context.Context, topo *Topology, clients []*client) (string, error) {
	return partitionWith(ctx, topo, clients, clients[0])
}

// partitionHolderMinority cuts {master, s1, the lock's holder} off from
// the rest: the holder keeps renewing on the old master.
func partitionHolderMinority(ctx context.Context, topo *Topology, clients []*client) (string, error) {
	holder, err := holderClient(ctx, topo, clients)
	if err != nil {
		return "", err
	}
	note, err := partitionWith(ctx, topo, clients, holder)
	return strings.TrimPrefix(note+"; ", "; ") + "cut off " + holder.node.Name, err
}

// partitionWith cuts {master, s1, minor} off from the rest.
func partitionWith(ctx context.Context, topo *Topology, clients []*client, minor *client) (string, error) {
	m, err := topo.Master(ctx)
	if err != nil {
		return "", err
	}
	minority := []*Node{m.Node, minor.node}
	var majority []*Node
	for _, r := range topo.Replicas(m) {
		majority = append(majority, r.Node)
	}
	for i, s := range topo.Sentinels {
		if i == 0 {
			minority = append(minority, s.Node)
		} else {
			majority = append(majority, s.Node)
		}
	}
	for _, c := range clients {
		if c != minor {
			majority = append(majority, c.node)
		}
	}
	return partitionAndHeal(ctx, topo, minority, majority)
}

// partitionReplicas cuts the master off from its replicas only.
func partitionReplicas(ctx context.Context, topo *Topology, _ []*client) (string, error) {
	m, err := topo.Master(ctx)
	if err != nil {
		return "", err
	}
	var rs []*Node
	for _, r := range topo.Replicas(m) {
		rs = append(rs, r.Node)
	}
	return partitionAndHeal(ctx, topo, []*Node{m.Node}, rs)
}

func partitionAndHeal(ctx context.Context, topo *Topology, a, b []*Node) (string, error) {
	before, _ := topo.Master(ctx)
	if err := topo.Net.Partition(ctx, a, b); err != nil {
		return "", err
	}
	sleepCtx(ctx, partitionFor)
	if err := topo.Net.Heal(ctx); err != nil {
		return "", err
	}
	if err := topo.WaitHealthy(ctx, 90*time.Second); err != nil {
		return "", err
	}
	return failoverNote(ctx, topo, before), nil
}

// jumpClock moves c1's wall clock ahead by clockJump for partitionFor,
// then back (the worker's jumpOnSignal).
func jumpClock(ctx context.Context, _ *Topology, clients []*client) (string, error) {
	c := clients[0]
	if err := c.proc.Signal(syscall.SIGUSR1); err != nil {
		return "", err
	}
	sleepCtx(ctx, partitionFor)
	return fmt.Sprintf("%s's clock +%v", c.node.Name, clockJump), c.proc.Signal(syscall.SIGUSR2)
}

// pauseHolder freezes the worker whose dlock client holds the lock now
// for pauseFor.
func pauseHolder(ctx context.Context, topo *Topology, clients []*client) (string, error) {
	target, err := holderClient(ctx, topo, clients)
	if err != nil {
		return "", err
	}
	if err := target.proc.Signal(syscall.SIGSTOP); err != nil {
		return "", err
	}
	sleepCtx(ctx, pauseFor)
	return "paused " + target.node.Name, target.proc.Signal(syscall.SIGCONT)
}

// holderClient returns the worker whose dlock client holds the lock (its
// ID is in a field of the lock's hash), waiting up to ten seconds for one.
func holderClient(ctx context.Context, topo *Topology, clients []*client) (*client, error) {
	var target *client
	err := poll(ctx, 10*time.Second, func() error {
		m, err := topo.Master(ctx)
		if err != nil {
			return err
		}
		v, err := topo.do(ctx, m.Addr(redisPort), "HKEYS", lockName)
		if err != nil {
			return err
		}
		fields, _ := v.([]any)
		for _, c := range clients {
			id, _ := os.ReadFile(c.out + ".id")
			for _, f := range fields {
				if len(id) > 0 && strings.Contains(fmt.Sprint(f), string(id)) {
					target = c
					return nil
				}
			}
		}
		return errors.New("nobody holds the lock")
	})
	return target, err
}

// pauseWaiter freezes, for pauseWaiterFor, the worker whose waiter heads
// the fair lock's queue while another worker holds the lock, and holds
// back the master's segments on the worker's subscription connections
// (Net.Hold) until that waiter, resumed, has queued again. The holder's
// unlock hands the lock over to the frozen waiter; that hold runs out,
// another waiter takes the lock, and the frozen waiter resumes, makes an
// attempt (its timer fired long ago) that finds the lock another's and
// queues it at the tail, and only then reads the hand-over's message, a
// few holds before its turn. Without the hold, whether the message or
// the timer comes first after SIGCONT is up to Go's scheduler (the
// message, in about half the pauses tried); held too long, the message
// comes after the waiter's next, real hand-over.
//
// Once every thread of the worker is stopped, the lock must not be the
// worker's: when it is, the worker took it between the look and the stop
// (or was handed it then) and may believe it holds, a frozen holder,
// which is pause-holder's fault and which no lease lock can make safe. It
// is resumed at once, long before that lease can run out, and another
// head is looked for.
func pauseWaiter(ctx context.Context, topo *Topology, clients []*client) (string, error) {
	for range 50 {
		target, head, err := headWaiterClient(ctx, topo, clients)
		if err != nil {
			if ctx.Err() != nil {
				return "", err
			}
			// The queue can be wedged: a place whose Lock has ended
			// but whose Client lives heads the free lock until its
			// deadline (the fair wait timeout), and nobody holds it.
			// BrokenHandOverNoSeq leaves one behind each time it takes
			// a stale hand-over for a grant.
			return "", fmt.Errorf("%w: %w", errNoTarget, err)
		}
		m, err := topo.Master(ctx)
		if err != nil {
			return "", err
		}
		ports, err := subscriptionPorts(ctx, topo, m, target)
		if err != nil {
			return "", err
		}
		if err := topo.Net.Hold(ctx, m.Node, target.node, ports...); err != nil {
			return "", err
		}
		if err := target.proc.Signal(syscall.SIGSTOP); err != nil {
			return "", errors.Join(err, topo.Net.Release(ctx, m.Node))
		}
		holds, err := stoppedHolds(ctx, topo, target)
		if err == nil && !holds {
			sleepCtx(ctx, pauseWaiterFor)
			err := target.proc.Signal(syscall.SIGCONT)
			note := "paused " + target.node.Name + " (head waiter)"
			if err == nil && awaitQueued(ctx, topo, m, head) != nil {
				note += ", not queued again"
			}
			return note, errors.Join(err, topo.Net.Release(ctx, m.Node))
		}
		if err := errors.Join(err, target.proc.Signal(syscall.SIGCONT), topo.Net.Release(ctx, m.Node)); err != nil {
			return "", err
		}
	}
	return "", errors.New("dlock/verify: no head waiter could be frozen without the lock in 50 tries")
}

// awaitQueued waits up to requeueWait, looking every millisecond, until
// the waiter owner is in the fair lock's queue on m.
func awaitQueued(ctx context.Context, topo *Topology, m *Proc, owner string) error {
	rdb := topo.Client(m.Addr(redisPort))
	defer rdb.Close()
	queue := layout.Prefixed(layout.QueuePrefix, lockName)
	deadline := time.Now().Add(requeueWait)
	for {
		_, err := rdb.LPos(ctx, queue, owner, redis.LPosArgs{}).Result()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// subscriptionPorts returns the ports of c's subscription connections to
// the server m, as its CLIENT LIST shows them.
func subscriptionPorts(ctx context.Context, topo *Topology, m *Proc, c *client) ([]int, error) {
	v, err := topo.do(ctx, m.Addr(redisPort), "CLIENT", "LIST")
	if err != nil {
		return nil, err
	}
	var ports []int
	for line := range strings.Lines(fmt.Sprint(v)) {
		f := map[string]string{}
		for kv := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		host, port, _ := strings.Cut(f["addr"], ":")
		p, err := strconv.Atoi(port)
		sub, _ := strconv.Atoi(f["sub"])
		psub, _ := strconv.Atoi(f["psub"])
		ssub, _ := strconv.Atoi(f["ssub"])
		if host != c.node.Addr || err != nil || sub+psub+ssub == 0 {
			continue
		}
		ports = append(ports, p)
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("dlock/verify: %s has no subscription connection to %s", c.node.Name, m.Node.Name)
	}
	return ports, nil
}

// lockAndHead returns, in one script, the fields of the lock's hash (its
// holders' owners) and the head of the fair lock's queue ("" for none).
var lockAndHead = `return {redis.call('hkeys', KEYS[1]), redis.call('lindex', KEYS[2], 0) or ''}`

// headWaiterClient returns the worker whose waiter heads the fair lock's
// queue while the lock is another worker's, and that waiter (its owner),
// waiting up to ten seconds for one.
func headWaiterClient(ctx context.Context, topo *Topology, clients []*client) (target *client, head string, err error) {
	err = poll(ctx, 10*time.Second, func() error {
		m, err := topo.Master(ctx)
		if err != nil {
			return err
		}
		v, err := topo.do(ctx, m.Addr(redisPort), "EVAL", lockAndHead, 2, lockName, layout.Prefixed(layout.QueuePrefix, lockName))
		if err != nil {
			return err
		}
		r, _ := v.([]any)
		if len(r) != 2 {
			return fmt.Errorf("dlock/verify: lock and head: %v", v)
		}
		fields, _ := r[0].([]any)
		head = fmt.Sprint(r[1])
		if len(fields) == 0 || head == "" {
			return fmt.Errorf("no waiter while another holds the lock: holders %v, head %q", fields, head)
		}
		for _, c := range clients {
			if ownedBy(head, c) && !slices.ContainsFunc(fields, func(f any) bool { return ownedBy(fmt.Sprint(f), c) }) {
				target = c
				return nil
			}
		}
		return fmt.Errorf("the head waiter %s's worker holds the lock too: %v", head, fields)
	})
	return target, head, err
}

// stoppedHolds waits until every thread of c's process is stopped and
// reports whether c holds the lock then.
func stoppedHolds(ctx context.Context, topo *Topology, c *client) (bool, error) {
	if err := poll(ctx, time.Second, c.proc.stopped); err != nil {
		return false, err
	}
	m, err := topo.Master(ctx)
	if err != nil {
		return false, err
	}
	v, err := topo.do(ctx, m.Addr(redisPort), "HKEYS", lockName)
	if err != nil {
		return false, err
	}
	fields, _ := v.([]any)
	return slices.ContainsFunc(fields, func(f any) bool { return ownedBy(fmt.Sprint(f), c) }), nil
}

// ownedBy reports whether owner (a lock field or a queued waiter) is one
// of c's dlock client's.
func ownedBy(owner string, c *client) bool {
	id, _ := os.ReadFile(c.out + ".id")
	return len(id) > 0 && strings.Contains(owner, string(id))
}

// pauseMaster freezes the master until the sentinels promote another
// server (or for pauseFor without Sentinel), then resumes it.
func pauseMaster(ctx context.Context, topo *Topology, _ []*client) (string, error) {
	m, err := topo.Master(ctx)
	if err != nil {
		return "", err
	}
	if err := m.Signal(syscall.SIGSTOP); err != nil {
		return "", err
	}
	err = awaitNewMaster(ctx, topo, m)
	if err := errors.Join(err, m.Signal(syscall.SIGCONT)); err != nil {
		return "", err
	}
	if err := topo.WaitHealthy(ctx, 90*time.Second); err != nil {
		return "", err
	}
	return failoverNote(ctx, topo, m), nil
}

// killMaster kills the master, waits for the failover (or a second
// without Sentinel), starts it again and waits for the topology.
func killMaster(ctx context.Context, topo *Topology, _ []*client) (string, error) {
	m, err := topo.Master(ctx)
	if err != nil {
		return "", err
	}
	m.Kill()
	if err := awaitNewMaster(ctx, topo, m); err != nil {
		return "", err
	}
	if err := m.Start(); err != nil {
		return "", err
	}
	if err := topo.awaitPing(ctx, m.Addr(redisPort)); err != nil {
		return "", err
	}
	if err := topo.WaitHealthy(ctx, 90*time.Second); err != nil {
		return "", err
	}
	return failoverNote(ctx, topo, m), nil
}

// failoverNote says whether the master changed from before.
func failoverNote(ctx context.Context, topo *Topology, before *Proc) string {
	after, err := topo.Master(ctx)
	if err != nil || before == nil || after == before {
		return ""
	}
	return "failover"
}

// awaitNewMaster waits until the sentinels agree on a master other than
// old; with a single server it waits pauseFor.
func awaitNewMaster(ctx context.Context, topo *Topology, old *Proc) error {
	if len(topo.Sentinels) == 0 && !topo.cluster {
		sleepCtx(ctx, pauseFor)
		return nil
	}
	return poll(ctx, 60*time.Second, func() error {
		m, err := topo.Master(ctx)
		if err != nil {
			return err
		}
		if m == old {
			return errors.New("no failover yet")
		}
		return nil
	})
}
