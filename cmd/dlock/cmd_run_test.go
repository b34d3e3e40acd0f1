package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
)

// TestRunExitCode checks that dlock run exits with COMMAND's status, 128+N
// when signal N killed it, and 127/126 when it cannot be run, and that the
// lock is free afterwards in every case.
func TestRunExitCode(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rdb := newRedis(t)
	for _, tc := range []struct {
		argv   []string
		code   int
		stderr string
	}{
		{[]string{"true"}, 0, ""},
		{[]string{"false"}, 1, ""},
		{[]string{"sh", "-c", "exit 3"}, 3, ""},
		{[]string{"sh", "-c", "exit 42"}, 42, ""},
		{[]string{"sh", "-c", "exit 255"}, 255, ""},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{[]string{"dlock-no-such-command"}, exitNotFound, "dlock: run: dlock-no-such-command: command not found\n"},
		{[]string{filepath.Join(dir, "missing")}, exitNotFound, "command not found"},
		{[]string{notExec}, exitCannotExec, "cannot execute " + notExec + ": permission denied"},
	} {
		t.Run(strings.Join(tc.argv, " "), func(t *testing.T) {
			r := cliRun(t, append([]string{"run", name, "--"}, tc.argv...)...)
			if r.code != tc.code {
				t.Errorf("exit code %d, want %d (stderr %q)", r.code, tc.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderr) || (tc.stderr == "" && r.stderr != "") {
				t.Errorf("stderr %q, want %q", r.stderr, tc.stderr)
			}
			if exists(t, rdb, name) {
				t.Errorf("lock still held after dlock run returned")
			}
		})
	}
}

// TestRunChildEnvironment checks DLOCK_NAME, DLOCK_OWNER (the holder's
// field in the lock hash, read while COMMAND runs) and DLOCK_TOKEN, which
// grows with every fenced run and is not inherited from dlock's own
// environment.
func TestRunChildEnvironment(t *testing.T) {
	name := lockName(t)
	t.Setenv("DLOCK_TOKEN", "inherited")
	t.Setenv("DLOCK_OWNER", "inherited")
	out := filepath.Join(t.TempDir(), "env")
	// The child records its environment and the lock hash as Redis has it
	// while the child runs.
	script := `printf '%s|%s|%s|' "$DLOCK_NAME" "$DLOCK_OWNER" "$DLOCK_TOKEN" > "$1"; redis-cli -u "$2" hgetall "$DLOCK_NAME" | tr '\n' ' ' >> "$1"`
	read := func(args ...string) []string {
		t.Helper()
		argv := append(append([]string{"run"}, args...), name, "--", "sh", "-c", script, "sh", out, redisURL)
		if r := cliRun(t, argv...); r.code != 0 {
			t.Fatalf("dlock %v: exit %d, stderr %q", argv, r.code, r.stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(b), "|")
	}

	got := read()
	owner := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}:[0-9]+$`)
	if got[0] != name || !owner.MatchString(got[1]) || got[2] != "" {
		t.Errorf("unfenced run: DLOCK_NAME=%q DLOCK_OWNER=%q DLOCK_TOKEN=%q; want %q, <uuid>:<n>, empty", got[0], got[1], got[2], name)
	}
	if want := got[1] + " 1 "; got[3] != want {
		t.Errorf("lock hash while COMMAND ran: %q, want %q (DLOCK_OWNER holding once)", got[3], want)
	}

	first := read("--fencing")
	second := read("--fencing")
	t1, err1 := strconv.ParseInt(first[2], 10, 64)
	t2, err2 := strconv.ParseInt(second[2], 10, 64)
	if err1 != nil || err2 != nil || t1 < 1 || t2 <= t1 {
		t.Errorf("fenced runs: DLOCK_TOKEN %q then %q; want increasing positive numbers", first[2], second[2])
	}
}

// TestRunTwoProcessesExclude runs two dlock processes on one lock: the
// second waits (subscribed to the lock's channel) while the first one's
// COMMAND writes to a file, and runs its COMMAND after the first is done.
func TestRunTwoProcessesExclude(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	release := filepath.Join(dir, "release")
	// COMMAND appends "start ID", waits for the release file, appends
	// "end ID".
	script := `echo "start $1" >> "$2"; while [ ! -e "$3" ]; do sleep 0.02; done; echo "end $1" >> "$2"`
	first, _, firstErr := dlockProcess(t, "run", name, "--", "sh", "-c", script, "sh", "A", log, release)
	eventually(t, 10*time.Second, fileHas(log, "start A"))

	second, _, secondErr := dlockProcess(t, "run", "--wait", "1m", name, "--", "sh", "-c", script, "sh", "B", log, release)
	rdb := newRedis(t)
	channel := layout.Prefixed(layout.LockChannelPrefix, name)
	eventually(t, 10*time.Second, func() error {
		if n := rdb.PubSubNumSub(t.Context(), channel).Val()[channel]; n != 1 {
			return fmt.Errorf("%d subscribers on %s, want the waiting dlock", n, channel)
		}
		return nil
	})
	if b, _ := os.ReadFile(log); string(b) != "start A\n" {
		t.Fatalf("while A holds the lock the log is %q, want only A's start", b)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, first); code != 0 {
		t.Errorf("first dlock: exit %d, stderr %q", code, firstErr)
	}
	if code := exitCode(t, second); code != 0 {
		t.Errorf("second dlock: exit %d, stderr %q", code, secondErr)
	}
	b, _ := os.ReadFile(log)
	if want := "start A\nend A\nstart B\nend B\n"; string(b) != want {
		t.Errorf("log %q, want %q", b, want)
	}
}

// TestRunLockLostStopsCommand deletes the lock behind a running dlock
// (short watchdog timeout): COMMAND gets SIGTERM, and dlock exits 6 with a
// message naming the lock.
func TestRunLockLostStopsCommand(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	script := `trap 'echo terminated >> "$1"; exit 0' TERM; echo started >> "$1"; while :; do sleep 0.05; done`
	cmd, _, stderr := dlockProcess(t, "run", "--watchdog", "300ms", name, "--", "sh", "-c", script, "sh", marks)
	eventually(t, 10*time.Second, fileHas(marks, "started"))

	if r := cliRun(t, "unlock", "--force", "--yes", name); r.code != 0 {
		t.Fatalf("unlock --force: exit %d, stderr %q", r.code, r.stderr)
	}
	if code := exitCode(t, cmd); code != exitLockLost {
		t.Errorf("exit %d, want %d", code, exitLockLost)
	}
	if b, _ := os.ReadFile(marks); string(b) != "started\nterminated\n" {
		t.Errorf("COMMAND's marks %q: want it started and then got SIGTERM", b)
	}
	for _, want := range []string{
		`dlock: lock lost: "` + name + `"`,
		"stopping sh: SIGTERM now, SIGKILL in 5s",
		`dlock: lock "` + name + `" was lost while sh ran; sh was stopped (it exited with status 0)`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q\nwant it to contain %q", stderr, want)
		}
	}
}

// TestRunLockLostKillsGroup: a COMMAND that ignores SIGTERM is killed
// after --grace, and so is the process it started in the background.
func TestRunLockLostKillsGroup(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := `trap '' TERM; sleep 600 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; while :; do sleep 0.05; done`
	cmd, _, stderr := dlockProcess(t, "run", "--watchdog", "300ms", "--grace", "300ms", name, "--", "sh", "-c", script, "sh", pidFile)
	eventually(t, 10*time.Second, func() error { _, err := os.Stat(pidFile); return err })
	b, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}

	if err := newRedis(t).Del(t.Context(), name).Err(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != exitLockLost {
		t.Errorf("exit %d, want %d; stderr %q", code, exitLockLost, stderr)
	}
	if want := "sh did not exit within 300ms of SIGTERM; killed it"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q\nwant it to contain %q", stderr, want)
	}
	eventually(t, 5*time.Second, func() error {
		// The background sleep was reparented; once killed, it is gone
		// (or a zombie about to be reaped by init).
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return nil
		}
		return fmt.Errorf("background process %d of COMMAND still runs", pid)
	})
}

// TestRunLeaseRunsOut: with a fixed --lease and no watchdog, COMMAND is
// stopped when the lease runs out.
func TestRunLeaseRunsOut(t *testing.T) {
	name := lockName(t)
	start := time.Now()
	r := cliRun(t, "run", "--lease", "300ms", name, "--", "sleep", "30")
	if r.code != exitLockLost {
		t.Errorf("exit %d, want %d; stderr %q", r.code, exitLockLost, r.stderr)
	}
	if !strings.Contains(r.stderr, "lease of 300ms ran out") {
		t.Errorf("stderr %q: want the lease named as the cause", r.stderr)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v: COMMAND was not stopped when the lease ran out", d)
	}
}

// TestRunWait checks --wait: 0 tries once, a duration bounds the wait,
// both exit 3 while another owner holds the lock.
func TestRunWait(t *testing.T) {
	name := lockName(t)
	locks, err := dlock.New(newRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	m, err := locks.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(lockCtx)

	r := cliRun(t, "run", "--wait", "0", name, "--", "true")
	if r.code != exitNotObtained || r.stderr != fmt.Sprintf("dlock: lock %q is held by another owner (--wait 0)\n", name) {
		t.Errorf("--wait 0: exit %d, stderr %q", r.code, r.stderr)
	}
	start := time.Now()
	r = cliRun(t, "run", "--wait", "200ms", name, "--", "true")
	if r.code != exitNotObtained || r.stderr != fmt.Sprintf("dlock: lock %q not obtained within --wait 200ms\n", name) {
		t.Errorf("--wait 200ms: exit %d, stderr %q", r.code, r.stderr)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("--wait 200ms gave up after %v", d)
	}
}

// TestRunForwardsSignals sends SIGTERM to dlock: COMMAND gets it, and
// dlock exits with COMMAND's status and frees the lock.
func TestRunForwardsSignals(t *testing.T) {
	name := lockName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	script := `trap 'echo got-TERM >> "$1"; exit 7' TERM; echo started >> "$1"; while :; do sleep 0.05; done`
	cmd, _, stderr := dlockProcess(t, "run", name, "--", "sh", "-c", script, "sh", marks)
	eventually(t, 10*time.Second, fileHas(marks, "started"))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 7 {
		t.Errorf("exit %d, want COMMAND's 7; stderr %q", code, stderr)
	}
	if b, _ := os.ReadFile(marks); string(b) != "started\ngot-TERM\n" {
		t.Errorf("COMMAND's marks %q", b)
	}
	if exists(t, newRedis(t), name) {
		t.Error("lock still held after dlock exited")
	}
}

// TestRunInterruptedWhileWaiting sends SIGINT to a dlock waiting for a
// held lock: it gives up with 128+2 and never runs COMMAND.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	name := lockName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	holder, _, _ := dlockProcess(t, "run", name, "--", "sh", "-c", `touch "$1"; sleep 600`, "sh", marks)
	eventually(t, 10*time.Second, func() error { _, err := os.Stat(marks); return err })

	waiter, _, stderr := dlockProcess(t, "run", name, "--", "sh", "-c", `echo ran >> "$1"`, "sh", marks)
	rdb := newRedis(t)
	channel := layout.Prefixed(layout.LockChannelPrefix, name)
	eventually(t, 10*time.Second, func() error {
		if n := rdb.PubSubNumSub(t.Context(), channel).Val()[channel]; n != 1 {
			return fmt.Errorf("%d subscribers, want the waiting dlock", n)
		}
		return nil
	})
	if err := waiter.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, waiter); code != 128+2 {
		t.Errorf("exit %d, want 130", code)
	}
	if want := fmt.Sprintf("dlock: gave up waiting for lock %q: interrupted by SIGINT\n", name); stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if b, _ := os.ReadFile(marks); len(b) != 0 {
		t.Errorf("COMMAND ran: %q", b)
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, holder); code != 128+15 {
		t.Errorf("holder: exit %d, want 143 (sleep killed by the forwarded SIGTERM)", code)
	}
}

// TestRunCommandForms: COMMAND may follow NAME directly, after "--", or
// be a shell string given with -c before or after NAME (flock's order);
// each runs once, with its arguments intact, under the lock.
func TestRunCommandForms(t *testing.T) {
	name := lockName(t)
	for _, tc := range []struct {
		args []string
		out  string
		code int
	}{
		{[]string{name, "echo", "a", "-v", "--", "b"}, "a -v -- b\n", 0},
		{[]string{name, "--", "echo", "--wait"}, "--wait\n", 0},
		{[]string{"-w", "5s", name, "sh", "-c", "echo $DLOCK_NAME; exit 3"}, name + "\n", 3},
		{[]string{name, "-c", "echo \"$DLOCK_NAME\" | tr a-z A-Z; exit 4"}, strings.ToUpper(name) + "\n", 4},
		{[]string{"-c", "echo one two", name}, "one two\n", 0},
		{[]string{"--command=echo long", name}, "long\n", 0},
		{[]string{"--", name, "echo", "after --"}, "after --\n", 0},
	} {
		r := cliRun(t, append([]string{"run"}, tc.args...)...)
		if r.code != tc.code || r.stdout != tc.out || r.stderr != "" {
			t.Errorf("dlock run %q: exit %d, stdout %q, stderr %q; want %d, %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.out)
		}
	}
}

// TestRunConflictExitCode: with -E, "lock not obtained" exits with the
// chosen status, so that it cannot be mistaken for COMMAND's own 3; the
// default stays 3.
func TestRunConflictExitCode(t *testing.T) {
	name := lockName(t)
	holder, _, _ := holdProcess(t, false, name)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "-n", name, "true"}, exitNotObtained},
		{[]string{"run", "-n", "-E", "75", name, "true"}, 75},
		{[]string{"run", "--conflict-exit-code", "200", "--wait", "50ms", name, "true"}, 200},
		{[]string{"run", "--nonblock", "-E", "0", name, "true"}, 0},
	} {
		r := cliRun(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, fmt.Sprintf("lock %q", name)) {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d", tc.args, r.code, r.stderr, tc.code)
		}
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, holder); code != 0 {
		t.Fatalf("holder: exit %d", code)
	}
	// Free now: COMMAND's own 3 passes through unchanged with -E.
	if r := cliRun(t, "run", "-n", "-E", "75", name, "sh", "-c", "exit 3"); r.code != 3 {
		t.Errorf("COMMAND exiting 3 under -E 75: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRunSpin: dlock run --spin takes a spin lock: excluded by a mutex
// holder, and, waiting, it takes the lock soon after a release that
// publishes nothing (a spin lock's), by its backoff: a mutex waiter would
// sleep until the holder's 30 s lease, past --wait. --spin names a mutex
// on one deployment: it refuses -s, --kind fair and --permits.
func TestRunSpin(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	locks, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	m, err := locks.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r := cliRun(t, "run", "--spin", "-n", name, "--", "true"); r.code != exitNotObtained {
		t.Errorf("--spin -n while a Mutex holds: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}

	spin, err := locks.NewSpinLock(name)
	if err != nil {
		t.Fatal(err)
	}
	held, err := spin.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		done <- cliRun(t, "run", "--spin", "-w", "20s", "--label", "spin waiter", name, "--", "sh", "-c", `echo "$DLOCK_OWNER"`)
	}()
	// The waiter has begun once its Client's holder record is written (at
	// its first attempt).
	eventually(t, 10*time.Second, func() error {
		keys, err := rdb.Keys(t.Context(), layout.ClientRecordPrefix+"*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if rdb.HGet(t.Context(), k, layout.RecordName).Val() == "spin waiter" {
				return nil
			}
		}
		return fmt.Errorf("no holder record of the waiting dlock yet")
	})
	channel := layout.Prefixed(layout.LockChannelPrefix, name)
	if n := rdb.PubSubNumSub(t.Context(), channel).Val()[channel]; n != 0 {
		t.Errorf("%d subscribers on %s: the --spin waiter subscribed", n, channel)
	}
	start := time.Now()
	if err := spin.Unlock(held); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 || !strings.Contains(r.stdout, ":") {
			t.Errorf("--spin waiter: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("--spin waiter took the lock %v after the release", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the --spin waiter did not take the lock after the release")
	}

	for _, args := range [][]string{{"-s"}, {"--kind", "fair"}, {"--permits", "2"}} {
		r := cliRun(t, append(append([]string{"run", "--spin"}, args...), name, "true")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--spin") {
			t.Errorf("--spin %v: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
}
