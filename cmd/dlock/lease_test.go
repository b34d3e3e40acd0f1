package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// killedHolder starts "dlock run ARGS... NAME sh -c ..." as a process,
// waits until its COMMAND runs, kills dlock with SIGKILL and returns when
// it is gone: its lock stays in Redis until the lease runs out.
func killedHolder(t *testing.T, name string, args ...string) {
	t.Helper()
	marks := filepath.Join(t.TempDir(), "marks")
	argv := append(append([]string{"run"}, args...), name, "sh", "-c", `touch "$1"; exec sleep 600`, "sh", marks)
	cmd, _, stderr := dlockProcess(t, argv...)
	eventually(t, 10*time.Second, func() error { _, err := os.Stat(marks); return err })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != -1 {
		t.Fatalf("dlock killed with SIGKILL: exit %d, stderr %q", code, stderr)
	}
}

// TestRunKilledHolderFreesLockWithin10s: the lock of a dlock run killed
// with SIGKILL is free again within the CLI's 10s default watchdog
// timeout (the library's default, 30s, kept it up to 30s), so a waiting
// dlock run gets it in about that time.
func TestRunKilledHolderFreesLockWithin10s(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	killedHolder(t, name)
	killed := time.Now()
	ttl, err := rdb.PTTL(t.Context(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > cliWatchdogTimeout {
		t.Errorf("lease left on the dead holder's lock: %v, want at most the CLI's %v", ttl, cliWatchdogTimeout)
	}
	r := cliRun(t, "run", "-w", "40s", name, "true")
	waited := time.Since(killed)
	if r.code != 0 {
		t.Fatalf("waiting run: exit %d, stderr %q", r.code, r.stderr)
	}
	// 10s, plus a wide margin for a loaded machine; the library's default
	// lease makes it 20s to 30s.
	if waited > cliWatchdogTimeout+5*time.Second {
		t.Errorf("the next run got the lock %v after the holder was killed, want within %v (+5s margin)", waited.Round(time.Millisecond), cliWatchdogTimeout)
	}
}

// TestRunLeaseFlagsOverrideCLIDefault: --watchdog and --lease still set
// the lease of run and hold: after a SIGKILL the lock keeps the lease
// they gave, longer than the CLI's default, and -n finds it held.
func TestRunLeaseFlagsOverrideCLIDefault(t *testing.T) {
	for _, flags := range [][]string{{"--watchdog", "60s"}, {"--lease", "60s"}} {
		t.Run(flags[0], func(t *testing.T) {
			name := lockName(t)
			killedHolder(t, name, flags...)
			ttl, err := newRedis(t).PTTL(t.Context(), name).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < 30*time.Second {
				t.Errorf("lease left after %v: %v, want most of 60s", flags, ttl)
			}
			r := cliRun(t, "run", "-n", name, "true")
			if want := fmt.Sprintf("dlock: lock %q is held by another owner (-n)\n", name); r.code != exitNotObtained || r.stderr != want {
				t.Errorf("run -n after the holder with %v was killed: exit %d, stderr %q; want %d, %q", flags, r.code, r.stderr, exitNotObtained, want)
			}
		})
	}
}

// TestHoldDefaultLease: dlock hold takes its lock with the CLI's 10s
// watchdog timeout too.
func TestHoldDefaultLease(t *testing.T) {
	name := lockName(t)
	holder, _, _ := holdProcess(t, false, name)
	ttl, err := newRedis(t).PTTL(t.Context(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > cliWatchdogTimeout {
		t.Errorf("lease left on a lock dlock hold holds: %v, want at most %v", ttl, cliWatchdogTimeout)
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, holder); code != 0 {
		t.Errorf("hold: exit %d", code)
	}
}
