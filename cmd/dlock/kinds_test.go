package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// holdScript is a COMMAND that appends "start ID" to a log, waits until a
// release file exists, and appends "end ID".
const holdScript = `echo "start $1" >> "$2"; while [ ! -e "$3" ]; do sleep 0.02; done; echo "end $1" >> "$2"`

// TestRunReadersShareWriterWaits runs two --kind read processes that hold
// the lock at the same time, and a --kind write process that waits until
// both are done.
func TestRunReadersShareWriterWaits(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	log, release := filepath.Join(dir, "log"), filepath.Join(dir, "release")
	r1, _, _ := dlockProcess(t, "run", "--kind", "read", name, "--", "sh", "-c", holdScript, "sh", "R1", log, release)
	eventually(t, 10*time.Second, fileHas(log, "start R1"))
	r2, _, _ := dlockProcess(t, "run", "--kind", "read", name, "--", "sh", "-c", holdScript, "sh", "R2", log, release)
	eventually(t, 10*time.Second, fileHas(log, "start R2"))

	w, _, _ := dlockProcess(t, "run", "--kind", "write", name, "--", "sh", "-c", holdScript, "sh", "W", log, release)
	waitSubscribers(t, layout.Prefixed(layout.RWChannelPrefix, name), 1)
	r := cliRun(t, "status", name)
	// The waiting writer shows too, as top counts it.
	for _, want := range []string{"kind     rwlock, read mode", "waiting  1 process subscribed to its unlock channel", "  read  1      "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status while two readers hold it:\n%s\nwant %q in it", r.stdout, want)
		}
	}
	if n := strings.Count(r.stdout, "  read  1  "); n != 2 {
		t.Errorf("status shows %d readers, want 2:\n%s", n, r.stdout)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, code := range []int{exitCode(t, r1), exitCode(t, r2), exitCode(t, w)} {
		if code != 0 {
			t.Errorf("process %d: exit %d", i, code)
		}
	}
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 6 || lines[4] != "start W" || lines[5] != "end W" || !strings.HasPrefix(lines[0], "start R") || !strings.HasPrefix(lines[1], "start R") {
		t.Errorf("log %q: want both readers in together, the writer after them", lines)
	}
}

// TestRunFairOrder queues two dlock processes behind a fair lock's holder:
// status shows them in order, and they run in that order.
func TestRunFairOrder(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	log, release := filepath.Join(dir, "log"), filepath.Join(dir, "release")
	holder, _, _ := dlockProcess(t, "run", "--kind", "fair", name, "--", "sh", "-c", holdScript, "sh", "A", log, release)
	eventually(t, 10*time.Second, fileHas(log, "start A"))
	rdb := newRedis(t)
	queue := layout.Prefixed(layout.QueuePrefix, name)
	var waiters []interface{ Wait() error }
	for i, id := range []string{"B", "C"} {
		cmd, _, _ := dlockProcess(t, "run", "--kind", "fair", name, "--", "sh", "-c", holdScript, "sh", id, log, release)
		waiters = append(waiters, cmd)
		eventually(t, 10*time.Second, func() error {
			if n := rdb.LLen(t.Context(), queue).Val(); n != int64(i+1) {
				return fmt.Errorf("%d queued, want %d", n, i+1)
			}
			return nil
		})
	}
	r := cliRun(t, "status", name)
	if !strings.Contains(r.stdout, "kind   fair\n") || !strings.Contains(r.stdout, "#  WAITING") || !strings.Contains(r.stdout, "\n2  ") {
		t.Errorf("status with two waiting:\n%s", r.stdout)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	exitCode(t, holder)
	for _, w := range waiters {
		_ = w.Wait()
	}
	b, _ := os.ReadFile(log)
	if want := "start A\nend A\nstart B\nend B\nstart C\nend C\n"; string(b) != want {
		t.Errorf("log %q, want %q", b, want)
	}
}

// TestUnlockForceEveryKind force-unlocks a fair lock and a read-write lock
// in each mode, held through the library: the right handle's ForceUnlock
// is used, the key goes, and the holder finds out.
func TestUnlockForceEveryKind(t *testing.T) {
	locks, err := dlock.New(newRedis(t), dlock.WithWatchdogTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	for _, kind := range []string{"fair", "read", "write"} {
		t.Run(kind, func(t *testing.T) {
			name := lockName(t)
			s := &session{clients: []*dlock.Client{locks}}
			lk, err := s.newLocker(kind, name)
			if err != nil {
				t.Fatal(err)
			}
			lockCtx, err := lk.Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			r := cliRun(t, "unlock", "--force", "--yes", name)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "unlocked ") {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if exists(t, newRedis(t), name) {
				t.Error("the lock is still there")
			}
			select {
			case <-lockCtx.Done():
				if !errors.Is(context.Cause(lockCtx), dlock.ErrLockLost) {
					t.Errorf("lock context ended with %v", context.Cause(lockCtx))
				}
			case <-time.After(10 * time.Second):
				t.Error("the holder did not find out")
			}
		})
	}
}

// TestRunRedLock runs dlock with three --redis servers: COMMAND runs
// while a quorum holds the lock (status shows it on at least two servers:
// on a loaded machine one may miss its node timeout), and dropping the
// lock from the servers stops COMMAND.
func TestRunRedLock(t *testing.T) {
	servers := redistest.NewServers(t, 3)
	var flags []string
	for _, s := range servers {
		flags = append(flags, "--redis", "redis://"+s.Addr())
	}
	name := "cli:redlock"
	// COMMAND shows the lock's status on the three servers, then runs on.
	script := `bin=$1; shift; "$bin" status "$@"; while :; do sleep 0.05; done`
	args := append([]string{"run", "--watchdog", "1s"}, flags...)
	args = append(args, name, "--", "sh", "-c", script, "sh", dlockBin)
	args = append(append(args, flags...), name)
	cmd, stdout, stderr := dlockProcess(t, args...)
	eventually(t, 10*time.Second, func() error {
		if n := strings.Count(stdout.String(), "state  held, lease left"); n < 2 {
			return fmt.Errorf("status shows the lock held on %d servers, want a quorum of the 3: %q", n, stdout)
		}
		return nil
	})
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := c.Del(t.Context(), name).Err(); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	if code := exitCode(t, cmd); code != exitLockLost {
		t.Errorf("exit %d, want %d; stderr %q", code, exitLockLost, stderr)
	}
}

// waitSubscribers waits until channel has n subscribers: that many
// dlock processes wait for the lock.
func waitSubscribers(t *testing.T, channel string, n int64) {
	t.Helper()
	rdb := newRedis(t)
	eventually(t, 10*time.Second, func() error {
		if got := rdb.PubSubNumSub(t.Context(), channel).Val()[channel]; got != n {
			return fmt.Errorf("%d subscribers on %s, want %d", got, channel, n)
		}
		return nil
	})
}
