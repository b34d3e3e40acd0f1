package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/history"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scenario is one chaos run: worker processes contend for one lock while
// fault injects faults.
type scenario struct {
	name     string
	procs    int
	worker   workerConfig // template; addresses and files are filled in
	lockArgs []string     // extra redis-server arguments for the lock's server
	latency  time.Duration
	// fault injects faults until ctx ends and returns how many it injected.
	fault func(ctx context.Context, t *testing.T, lock *redistest.Server) int
	// broken marks the negative control: the checker must find violations.
	broken bool

	// connect, when set, points each worker at a lock on a topology
	// (Sentinel, cluster) instead of a plain server, which is then not
	// started: fault gets a nil server and clean checks the topology.
	connect func(cfg *workerConfig)
	clean   func(t *testing.T, name string)
	// unsafe marks runs whose faults can grant the lock twice by design
	// (failovers lose unreplicated writes): violations and lost increments
	// are reported in the summary, not failed on.
	unsafe bool
	notes  string // added to the summary row
	// check, when set, asserts what the scenario's name promises about
	// its outcome (after the checks every scenario gets); it may add to
	// the notes through *outcome.
	check func(t *testing.T, o *outcome)
}

// outcome is what a run measured.
type outcome struct {
	acquired  int
	maxWait   time.Duration
	faults    int
	overlaps  int // double grants: holds that overlapped in time
	reversals int // holds whose fencing token was not above an earlier one's
	notes     []string
	holds     []history.Hold

	// Stale fenced writes (history.StaleWrites): sent after a write with a
	// token at least as high was accepted; the fenced write must refuse
	// every one, so accepted must be 0 in every run.
	staleWrites, staleAccepted int
}

// env is the Redis side of a scenario.
type env struct {
	lock, resource *redistest.Server
	lockAddr       string // where workers reach the lock (maybe a proxy)
}

func newEnv(t *testing.T, lockArgs []string, latency time.Duration) *env {
	t.Helper()
	e := &env{lock: redistest.NewServer(t, lockArgs...), resource: redistest.NewServer(t)}
	e.lockAddr = e.lock.Addr()
	if latency > 0 {
		p := redistest.NewTestProxy(t, e.lock.Addr())
		p.SetLatency(latency)
		e.lockAddr = p.Addr()
	}
	return e
}

// syncBuffer is a bytes.Buffer a child process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWorker runs the test binary as a worker process.
func startWorker(t *testing.T, cfg workerConfig) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	return startWorkerWith(t, cfg, nil)
}

// startWorkerWith is startWorker with the worker's stdin read from stdin.
func startWorkerWith(t *testing.T, cfg workerConfig, stdin io.Reader) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	out := &syncBuffer{}
	cmd.Stdout = out
	cmd.Stderr = os.Stderr
	cmd.Stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // the test failed before waiting for it
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out
}

// run runs sc and checks its history: mutual exclusion (reported only for
// unsafe runs), the counter, that every acquisition was made, that Redis
// is left clean, and sc.check. It returns what it measured.
func run(t *testing.T, sc scenario) outcome {
	var e *env
	if sc.connect != nil {
		e = &env{resource: redistest.NewServer(t)}
	} else {
		e = newEnv(t, sc.lockArgs, sc.latency)
	}
	dir := t.TempDir()
	var files []string
	type proc struct {
		cmd *exec.Cmd
		out *syncBuffer
	}
	var procs []proc
	for i := range sc.procs {
		cfg := sc.worker
		cfg.LockAddr, cfg.ResourceAddr = e.lockAddr, e.resource.Addr()
		cfg.Name = "chaos:" + sc.name
		cfg.Out = filepath.Join(dir, fmt.Sprintf("worker%d.jsonl", i))
		if sc.connect != nil {
			sc.connect(&cfg)
		}
		files = append(files, cfg.Out)
		cmd, out := startWorker(t, cfg)
		procs = append(procs, proc{cmd, out})
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop() // ends the faults however run ends
	faults := make(chan int, 1)
	go func() {
		n := 0
		if sc.fault != nil {
			n = sc.fault(ctx, t, e.lock)
		}
		faults <- n
	}()
	var total workerResult
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			stop()
			t.Fatalf("worker %d: %v", i, err)
		}
		var r workerResult
		if err := json.Unmarshal([]byte(p.out.String()), &r); err != nil {
			t.Fatalf("worker %d output %q: %v", i, p.out.String(), err)
		}
		total.Acquired += r.Acquired
		total.Increments += r.Increments
		total.Rejected += r.Rejected
		total.Lost += r.Lost
		total.Errors += r.Errors
		total.Deadlocks += r.Deadlocks
	}
	stop()
	var nfaults int
	select {
	case nfaults = <-faults:
	case <-time.After(2 * time.Minute): // a failover is seen through; nothing takes longer
		t.Fatal("the fault injection did not stop within 2 minutes of the end of the run")
	}

	resRdb := e.resource.Client()
	defer resRdb.Close()
	counter, err := resRdb.Get(context.Background(), counterKey).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("reading the counter: %v", err)
	}
	holds, err := history.Read(files...)
	if err != nil {
		t.Fatal(err)
	}
	violations := history.Check(holds)
	var maxWait time.Duration
	for _, h := range holds {
		maxWait = max(maxWait, time.Duration(h.Wait))
	}
	o := outcome{acquired: total.Acquired, maxWait: maxWait, faults: nfaults, holds: holds}
	for _, v := range violations {
		if v.Reason == "overlap" {
			o.overlaps++
		}
	}
	o.reversals = len(violations) - o.overlaps
	o.staleWrites, o.staleAccepted = history.StaleWrites(holds)
	notes := fmt.Sprintf("lost %d, errors %d", total.Lost, total.Errors)
	if sc.unsafe {
		notes += fmt.Sprintf(", double grants (overlaps) %d, holds with a token not above an earlier one %d, fenced writes rejected %d, stale writes %d (accepted %d), increments lost %d",
			o.overlaps, o.reversals, total.Rejected, o.staleWrites, o.staleAccepted, total.Increments-counter)
	}
	if sc.worker.Deadlocks > 0 {
		notes += fmt.Sprintf(", deadlock detection every %v: deadlocks reported %d", sc.worker.Deadlocks, total.Deadlocks)
	}
	if total.Deadlocks > 0 {
		t.Errorf("%d Locks failed with ErrDeadlock: one lock has no cycle, each is a false positive", total.Deadlocks)
	}
	if sc.notes != "" {
		notes += "; " + sc.notes
	}
	t.Logf("%d acquisitions, %d violations, max wait %v, %d faults, %+v", total.Acquired, len(violations), maxWait, nfaults, total)
	defer func() {
		for _, n := range o.notes {
			notes += "; " + n
		}
		addRow(row{sc.name, total.Acquired, len(violations), maxWait.Round(time.Millisecond).String(), nfaults, notes})
	}()

	want := sc.procs * sc.worker.Goroutines * sc.worker.Acquisitions
	if total.Acquired != want || len(holds) != want {
		t.Errorf("%d acquisitions (%d recorded), want %d", total.Acquired, len(holds), want)
	}
	if sc.broken {
		if len(violations) == 0 {
			t.Fatal("negative control: the checker found no violation in a run built to have them")
		}
		if counter == total.Increments {
			t.Log("negative control: no increment was lost this time")
		}
		return o
	}
	for i, v := range violations {
		switch {
		case i >= 5:
		case sc.unsafe:
			t.Log(v)
		default:
			t.Error(v)
		}
	}
	if o.staleAccepted > 0 {
		t.Errorf("%d of %d stale fenced writes accepted: the resource let an older holder write after a newer one", o.staleAccepted, o.staleWrites)
	}
	if counter != total.Increments && !sc.unsafe {
		t.Errorf("counter = %d after %d increments: an increment was lost", counter, total.Increments)
	}
	if sc.check != nil {
		sc.check(t, &o)
	}
	if sc.clean != nil {
		sc.clean(t, "chaos:"+sc.name)
		return o
	}
	checkClean(t, e.lock, "chaos:"+sc.name)
	return o
}

// checkClean asserts that nothing of the lock is left in Redis once every
// worker is gone: no subscriber and no key but the fencing counter.
func checkClean(t *testing.T, srv *redistest.Server, name string) {
	t.Helper()
	rdb := srv.Client()
	defer rdb.Close()
	ctx := context.Background()
	// A server restarted by the last fault may still be loading its data.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := rdb.Ping(ctx).Err()
		if err == nil || !redis.IsLoadingError(err) || time.Now().After(deadline) {
			break
		}
	}
	ch := "redisson_lock__channel:{" + name + "}"
	if n, err := rdb.PubSubNumSub(ctx, ch).Result(); err != nil || n[ch] != 0 {
		t.Errorf("subscribers left on %s: %v %v", ch, n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		keys, err := scanAll(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, k := range keys {
			if strings.HasPrefix(k, "redisson_lock_token:") {
				continue // the fencing counter lives on by design
			}
			if strings.HasPrefix(k, "dlock:client:") {
				continue // a killed worker's holder record expires with its TTL
			}
			left = append(left, k)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("keys left behind: %v", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func scanAll(ctx context.Context, rdb *redis.Client) ([]string, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// every calls f every d until ctx ends and counts the calls that succeed.
func every(ctx context.Context, d time.Duration, f func() error) int {
	n := 0
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
			if f() == nil {
				n++
			}
		}
	}
}

// scale picks the short or the soak size.
func scale(short, long int) int {
	if soak {
		return long
	}
	return short
}
