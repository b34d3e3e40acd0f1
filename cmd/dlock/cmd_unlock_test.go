package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestUnlockForce checks the prompt (no, end of input, yes), --yes, and
// that the holder finds out: its lock context ends with ErrLockLost at its
// next renewal.
func TestUnlockForce(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	locks, err := dlock.New(rdb, dlock.WithWatchdogTimeout(300*time.Millisecond), dlock.WithClientName("unlock test"))
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
	owner, _ := locks.Owner(lockCtx)
	awaitRecord(t, rdb, locks.ID())
	// The question names the holder's process, as its Client recorded it.
	host, _ := os.Hostname()
	question := regexp.QuoteMeta(fmt.Sprintf("Delete lock %q, held by %s (dlock.test \"unlock test\" on %s, pid %d, started ", name, owner, host, os.Getpid())) +
		`[0-9T:-]+Z, [0-9.]+m?s ago\)\? \[y/N\] `
	asks := regexp.MustCompile("^" + question)

	for _, answer := range []string{"n\n", "", "maybe\n"} {
		r := cliRunEnv(t, nil, answer, "unlock", "--force", name)
		want := regexp.MustCompile("^" + question + regexp.QuoteMeta(fmt.Sprintf("dlock: unlock: not confirmed; lock %q left as it is\n", name)) + "$")
		if r.code != exitFailure || !want.MatchString(r.stderr) || r.stdout != "" {
			t.Errorf("answer %q: exit %d, stdout %q, stderr %q; want %d, stderr matching %q", answer, r.code, r.stdout, r.stderr, exitFailure, want)
		}
	}
	if n, err := m.HoldCount(lockCtx); n != 1 || err != nil {
		t.Fatalf("hold count %d, %v after declined unlocks, want 1", n, err)
	}

	r := cliRunEnv(t, nil, "y\n", "unlock", "--force", name)
	if want := fmt.Sprintf("unlocked %q (held by %s)\n", name, owner); r.code != 0 || r.stdout != want || !asks.MatchString(r.stderr) {
		t.Errorf("answer y: exit %d, stdout %q, stderr %q; want stdout %q", r.code, r.stdout, r.stderr, want)
	}
	select {
	case <-lockCtx.Done():
		if !errors.Is(context.Cause(lockCtx), dlock.ErrLockLost) {
			t.Errorf("lock context ended with %v, want ErrLockLost", context.Cause(lockCtx))
		}
	case <-time.After(10 * time.Second):
		t.Error("the holder's lock context was not cancelled after the force unlock")
	}

	r = cliRun(t, "unlock", "--force", "--yes", name)
	if want := fmt.Sprintf("lock %q is not held; nothing to unlock\n", name); r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("unlock of a free lock: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	other, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r = cliRun(t, "unlock", "--yes", "--force", name)
	if r.code != 0 || r.stderr != "" || exists(t, newRedis(t), name) {
		t.Errorf("--yes: exit %d, stderr %q, or the lock is still there", r.code, r.stderr)
	}
	awaitDone(t, other, 10*time.Second, "the second holder's lock context after the force unlock")
}
