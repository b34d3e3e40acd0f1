package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The test binary doubles as a deadlock participant when
// DLOCK_DEADLOCK_HELPER is set: "URL FIRST SECOND". It takes FIRST with a
// Client that records its waits, prints "held", and, after a line on
// stdin, takes SECOND with FIRST's lock context, printing "waiting" once
// its wait is recorded: it then waits until killed.
func init() {
	spec := os.Getenv("DLOCK_DEADLOCK_HELPER")
	if spec == "" {
		return
	}
	os.Exit(deadlockHelper(strings.Fields(spec)))
}

func deadlockHelper(args []string) int {
	if len(args) != 3 {
		return 2
	}
	ctx := context.Background()
	opt, err := redis.ParseURL(args[0])
	if err != nil {
		return 2
	}
	rdb := redis.NewClient(opt)
	c, err := dlock.New(rdb, dlock.WithDeadlockDetection(0), dlock.WithClientName("helper "+args[1]))
	if err != nil {
		return 1
	}
	first, _ := c.NewMutex(args[1])
	second, _ := c.NewMutex(args[2])
	held, err := first.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("held")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	_, err = second.Lock(held) // until killed
	fmt.Println(err)
	return 1
}

// deadlockParticipant starts the test binary as a helper taking first,
// then second, and returns its process and stdin once it holds first.
func deadlockParticipant(t *testing.T, first, second string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_DEADLOCK_HELPER="+redisURL+" "+first+" "+second)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "held") {
			return fmt.Errorf("helper printed %q", out.String())
		}
		return nil
	})
	return cmd, stdin
}

// TestDeadlocks: two processes, each holding one lock and waiting for the
// other's, are reported by dlock deadlocks as one cycle, with their pids
// and labels, and the command then exits with status 7 (0 while there is
// none).
func TestDeadlocks(t *testing.T) {
	name := lockName(t)
	l1, l2 := name+":1", name+":2"
	if r := cliRun(t, "deadlocks"); r.code != 0 || !strings.Contains(r.stdout, "no deadlocks") {
		t.Fatalf("before: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	a, inA := deadlockParticipant(t, l1, l2)
	b, inB := deadlockParticipant(t, l2, l1)
	for _, in := range []io.Writer{inA, inB} {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var cycle struct {
		Waits []deadlockWaitJSON `json:"waits"`
	}
	eventually(t, 10*time.Second, func() error {
		r := cliRun(t, "deadlocks", "--json")
		if r.code != exitDeadlock || strings.Count(r.stdout, "\n") != 1 {
			return fmt.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return json.Unmarshal([]byte(r.stdout), &cycle)
	})
	pids := map[int]string{}
	for _, w := range cycle.Waits {
		pids[w.PID] = w.Lock
	}
	if len(cycle.Waits) != 2 || pids[a.Process.Pid] != l2 || pids[b.Process.Pid] != l1 {
		t.Errorf("cycle %+v, want pid %d waiting for %s and pid %d for %s", cycle.Waits, a.Process.Pid, l2, b.Process.Pid, l1)
	}
	// Each wait names its process's label (WithClientName), "helper"
	// and the lock it holds, as the text output does.
	labels := map[int]string{a.Process.Pid: "helper " + l1, b.Process.Pid: "helper " + l2}
	for _, w := range cycle.Waits {
		if w.Label != labels[w.PID] {
			t.Errorf("--json: pid %d's label %q, want %q", w.PID, w.Label, labels[w.PID])
		}
	}
	r := cliRun(t, "deadlocks")
	if r.code != exitDeadlock || !strings.Contains(r.stderr, "1 wait-for cycle(s) found") {
		t.Errorf("exit %d, stderr %q: want %d and the count of cycles", r.code, r.stderr, exitDeadlock)
	}
	for _, want := range []string{"deadlock 1: 2 owners", fmt.Sprintf("pid %d (helper %s) waits for %q", a.Process.Pid, l1, l2)} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q, want %q", r.stdout, want)
		}
	}
}
