package main

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holdProcess starts "dlock hold args..." and returns it with the lines
// it printed on stdout once it holds the lock (up to DLOCK_OWNER, or
// DLOCK_TOKEN with --fencing).
func holdProcess(t *testing.T, fenced bool, args ...string) (*exec.Cmd, map[string]string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(dlockBin, append([]string{"hold"}, args...)...)
	cmd.Env = append(cmd.Environ(), "DLOCK_REDIS_URL="+redisURL)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	last := "DLOCK_OWNER"
	if fenced {
		last = "DLOCK_TOKEN"
	}
	// The lines are read on a goroutine of their own, which drains stdout
	// after the last one so the process never blocks on it.
	lines := make(chan [2]string, 16)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), "=")
			select {
			case lines <- [2]string{k, v}:
			case <-stop:
				return
			}
			if k == last {
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
	}()
	vars := map[string]string{}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case kv, ok := <-lines:
			if !ok {
				t.Fatalf("dlock hold ended its output before %s: %q; stderr %q", last, vars, stderr.String())
			}
			vars[kv[0]] = kv[1]
			if kv[0] == last {
				return cmd, vars, &stderr
			}
		case <-deadline:
			t.Fatalf("dlock hold printed no %s within 30s: %q; stderr %q", last, vars, stderr.String())
		}
	}
}

// TestHold: dlock hold prints the hold's variables once the lock is held
// (in Redis, under the owner it prints), keeps it while others try, and
// releases it on SIGTERM with exit 0.
func TestHold(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(signalName(sig), func(t *testing.T) {
			name := lockName(t) + " with space"
			rdb := newRedis(t)
			cmd, vars, stderr := holdProcess(t, true, "--fencing", name)
			if want := "'" + name + "'"; vars["DLOCK_NAME"] != want {
				t.Errorf("DLOCK_NAME=%s, want %s (quoted for sh)", vars["DLOCK_NAME"], want)
			}
			if n, err := rdb.HGet(t.Context(), name, vars["DLOCK_OWNER"]).Int(); n != 1 || err != nil {
				t.Errorf("lock hash field %q = %d, %v; want the printed owner holding once", vars["DLOCK_OWNER"], n, err)
			}
			if tok, _ := rdb.Get(t.Context(), "redisson_lock_token:{"+name+"}").Result(); vars["DLOCK_TOKEN"] != tok {
				t.Errorf("DLOCK_TOKEN=%s, want the last token issued, %s", vars["DLOCK_TOKEN"], tok)
			}
			if r := cliRun(t, "run", "-n", name, "true"); r.code != exitNotObtained {
				t.Errorf("dlock run -n while held: exit %d, stderr %q", r.code, r.stderr)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, cmd); code != 0 {
				t.Errorf("exit %d after %v, want 0; stderr %q", code, sig, stderr)
			}
			if stderr.String() != "" {
				t.Errorf("stderr %q", stderr)
			}
			if exists(t, rdb, name) {
				t.Error("lock still held after dlock hold exited")
			}
		})
	}
}

// TestHoldLockLost: a lock deleted under dlock hold makes it exit 6 and
// say so.
func TestHoldLockLost(t *testing.T) {
	name := lockName(t)
	cmd, _, stderr := holdProcess(t, false, "--watchdog", "300ms", name)
	if err := newRedis(t).Del(t.Context(), name).Err(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != exitLockLost {
		t.Errorf("exit %d, want %d", code, exitLockLost)
	}
	if want := fmt.Sprintf("dlock: lock lost: %q", name); !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "no longer holding it") {
		t.Errorf("stderr %q, want it to contain %q and say the hold ended", stderr, want)
	}
}

// TestHoldNonblock: dlock hold -n on a held lock exits with the conflict
// status at once, -E choosing it.
func TestHoldNonblock(t *testing.T) {
	name := lockName(t)
	holder, _, _ := holdProcess(t, false, name)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"hold", "-n", name}, exitNotObtained},
		{[]string{"hold", "--nonblock", "-E", "0", name}, 0},
		{[]string{"hold", "-E", "99", "-w", "100ms", name}, 99},
	} {
		r := cliRun(t, tc.args...)
		if r.code != tc.code || r.stdout != "" || !strings.Contains(r.stderr, fmt.Sprintf("lock %q", name)) {
			t.Errorf("dlock %q: exit %d, stdout %q, stderr %q; want exit %d and nothing printed", tc.args, r.code, r.stdout, r.stderr, tc.code)
		}
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, holder); code != 0 {
		t.Errorf("holder: exit %d", code)
	}
}
