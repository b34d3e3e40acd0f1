package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// leaderValue is what "dlock leader --json NAME" says leads: its value,
// or "" when nobody does.
func leaderValue(t testing.TB, name string) (string, error) {
	t.Helper()
	r := cliRun(t, "leader", "--json", name)
	if r.code != 0 {
		return "", fmt.Errorf("dlock leader: exit %d, stderr %q", r.code, r.stderr)
	}
	var j leaderJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		return "", fmt.Errorf("dlock leader --json: %q: %v", r.stdout, err)
	}
	return j.Value, nil
}

// awaitLeader waits until dlock leader shows want ("" for none).
func awaitLeader(t testing.TB, name, want string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() error {
		got, err := leaderValue(t, name)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("leader %q, want %q", got, want)
		}
		return nil
	})
}

// TestElectLeaderKilled: two dlock elect processes; the leader runs its
// COMMAND with the election's variables, and when it is killed -9 the
// other is elected within the lease and runs its COMMAND. A SIGTERM to
// the new leader stops its COMMAND, which it resigns after: nobody leads,
// nothing of the leadership is left, and dlock exits with the COMMAND's
// status.
func TestElectLeaderKilled(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	const lease = 2 * time.Second
	script := `echo "$DLOCK_LEADER_VALUE $DLOCK_NAME $DLOCK_TOKEN" > ` + dir + `/$DLOCK_LEADER_VALUE; exec sleep 60`
	a, _, errA := dlockProcess(t, "elect", "--watchdog", lease.String(), "--value", "a", name, "--", "sh", "-c", script)
	eventually(t, 10*time.Second, fileHas(filepath.Join(dir, "a"), "a "+name+" "))
	b, _, errB := dlockProcess(t, "elect", "--watchdog", lease.String(), "--value", "b", name, "--", "sh", "-c", script)
	awaitLeader(t, name, "a", 5*time.Second)

	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if code := exitCode(t, a); code != -1 {
		t.Errorf("killed leader: exit %d (stderr %q)", code, errA.String())
	}
	eventually(t, lease+10*time.Second, fileHas(filepath.Join(dir, "b"), "b "+name+" "))
	if d := time.Since(killed); d > lease+3*time.Second {
		t.Errorf("b elected %v after a was killed, lease %v", d, lease)
	}
	awaitLeader(t, name, "b", 5*time.Second)

	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, b); code != 128+15 {
		t.Errorf("new leader: exit %d, want 143 (sleep killed by the forwarded SIGTERM); stderr %q", code, errB.String())
	}
	awaitLeader(t, name, "", 5*time.Second)
	rdb := newRedis(t)
	if exists(t, rdb, name) || exists(t, rdb, layout.Prefixed(layout.ElectionPrefix, name)) {
		t.Error("the leadership is still in Redis after the leader resigned")
	}
}

// TestElectOnLoss: when the leadership is lost under COMMAND, dlock elect
// stops COMMAND and exits 6 (--on-loss exit), or campaigns again and runs
// COMMAND anew (--on-loss recampaign).
func TestElectOnLoss(t *testing.T) {
	for _, onLoss := range []string{"exit", "recampaign"} {
		t.Run(onLoss, func(t *testing.T) {
			name := lockName(t)
			runs := filepath.Join(t.TempDir(), "runs")
			rdb := newRedis(t)
			p, _, stderr := dlockProcess(t, "elect", "--watchdog", "1s", "--grace", "1s", "--on-loss", onLoss, name,
				"sh", "-c", "echo run >> "+runs+"; exec sleep 60")
			eventually(t, 10*time.Second, fileHas(runs, "run\n"))
			if err := rdb.Del(t.Context(), name).Err(); err != nil {
				t.Fatal(err)
			}
			if onLoss == "exit" {
				if code := exitCode(t, p); code != exitLockLost {
					t.Errorf("exit %d, want %d; stderr %q", code, exitLockLost, stderr.String())
				}
				return
			}
			eventually(t, 15*time.Second, fileHas(runs, "run\nrun\n"))
			if want := "campaigning again"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q, want %q", stderr.String(), want)
			}
			if err := p.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, p); code != 128+15 {
				t.Errorf("exit %d after SIGTERM, want 143; stderr %q", code, stderr.String())
			}
		})
	}
}

// TestElectRecampaignWaitsAgain: --wait bounds the first campaign only.
// After a loss, --on-loss recampaign campaigns for as long as it takes:
// here the lock is taken from the leader and held by another owner for
// longer than --wait, and dlock elect waits it out and runs COMMAND again
// instead of giving up (exit 3).
func TestElectRecampaignWaitsAgain(t *testing.T) {
	name := lockName(t)
	runs := filepath.Join(t.TempDir(), "runs")
	rdb := newRedis(t)
	const wait, stolen = 2 * time.Second, 7 * time.Second
	p, _, stderr := dlockProcess(t, "elect", "--watchdog", "1s", "--grace", "1s", "--on-loss", "recampaign", "--wait", wait.String(), name,
		"sh", "-c", "echo run >> "+runs+"; exec sleep 60")
	eventually(t, 10*time.Second, fileHas(runs, "run\n"))
	// Another owner takes the lock: the leader loses it and campaigns
	// again, and the lock is free only when the thief's hold expires.
	steal := redis.NewScript(`redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], 'thief:1', 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return 1`)
	if err := steal.Run(t.Context(), rdb, []string{name}, stolen.Milliseconds()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, stolen+15*time.Second, func() error {
		if s := stderr.String(); strings.Contains(s, "not elected") {
			t.Fatalf("dlock elect gave up on its second campaign after %v (--wait %v bounds the first one only): stderr %q",
				time.Since(start).Round(time.Millisecond), wait, s)
		}
		return fileHas(runs, "run\nrun\n")()
	})
	if d := time.Since(start); d < wait {
		t.Errorf("elected again %v after the lock was taken, within --wait %v: the test's thief did not keep it out", d, wait)
	}
	if err := p.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, p); code != 128+15 {
		t.Errorf("exit %d after SIGTERM, want 143; stderr %q", code, stderr.String())
	}
}

// TestLeaderWatch: dlock leader --watch prints the state, then each
// change as it happens, until interrupted (exit 0).
func TestLeaderWatch(t *testing.T) {
	name := lockName(t)
	w, out, stderr := dlockProcess(t, "leader", "--watch", name)
	eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), name+": no leader\n") {
			return fmt.Errorf("watcher printed %q", out.String())
		}
		return nil
	})
	if r := cliRun(t, "elect", "--value", "v1", name, "--", "true"); r.code != 0 {
		t.Fatalf("dlock elect: exit %d, stderr %q", r.code, r.stderr)
	}
	eventually(t, 10*time.Second, func() error {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) < 3 {
			return fmt.Errorf("watcher printed %q", out.String())
		}
		if !strings.Contains(lines[1], `leader "v1" on `) || !strings.Contains(lines[1], fmt.Sprintf("pid %d", os.Getpid())) ||
			lines[2] != name+": no leader" {
			return fmt.Errorf("watcher printed %q", out.String())
		}
		return nil
	})
	if err := w.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, w); code != 0 {
		t.Errorf("watcher: exit %d, stderr %q", code, stderr.String())
	}
}

// TestElectLeaderPaused: a leader paused (SIGSTOP) past its lease is
// replaced within about the lease; when it runs again it finds its
// leadership lost, stops its COMMAND and exits 6.
func TestElectLeaderPaused(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	const lease = 2 * time.Second
	script := `echo "$DLOCK_LEADER_VALUE" > ` + dir + `/$DLOCK_LEADER_VALUE; exec sleep 60`
	a, _, errA := dlockProcess(t, "elect", "--watchdog", lease.String(), "--grace", "1s", "--value", "a", name, "--", "sh", "-c", script)
	eventually(t, 10*time.Second, fileHas(filepath.Join(dir, "a"), "a\n"))
	_, _, _ = dlockProcess(t, "elect", "--watchdog", lease.String(), "--value", "b", name, "--", "sh", "-c", script)
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	eventually(t, lease+10*time.Second, fileHas(filepath.Join(dir, "b"), "b\n"))
	if d := time.Since(paused); d > lease+3*time.Second {
		t.Errorf("b elected %v after a was paused, lease %v", d, lease)
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, a); code != exitLockLost {
		t.Errorf("paused leader: exit %d, want %d; stderr %q", code, exitLockLost, errA.String())
	}
	awaitLeader(t, name, "b", 5*time.Second)
}
