package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
)

// statusJSON runs dlock status --json NAME.
func statusJSON(t *testing.T, name string) lockState {
	t.Helper()
	r := cliRun(t, "status", "--json", name)
	if r.code != 0 {
		t.Fatalf("status: exit %d, stderr %q", r.code, r.stderr)
	}
	var st lockState
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return st
}

// TestStatusShowsRunHolder: while dlock run holds a lock, status, list and
// the unlock prompt show dlock's pid, host and the command it runs.
func TestStatusShowsRunHolder(t *testing.T) {
	name := lockName(t)
	cmd, _, _ := dlockProcess(t, "run", name, "sleep", "60")
	pid := cmd.Process.Pid
	host, _ := os.Hostname()
	want := fmt.Sprintf(`dlock "sleep 60" on %s, pid %d, started `, host, pid)
	eventually(t, 10*time.Second, func() error {
		if r := cliRun(t, "status", name); !strings.Contains(r.stdout, want) {
			return fmt.Errorf("status shows\n%s\nwant %q in it", r.stdout, want)
		}
		return nil
	})
	st := statusJSON(t, name)
	if len(st.Holders) != 1 || st.Holders[0].Client == nil {
		t.Fatalf("status --json holders %+v: want one with its client", st.Holders)
	}
	ci := st.Holders[0].Client
	if ci.PID != pid || ci.Host != host || ci.Program != "dlock" || ci.Name != "sleep 60" {
		t.Errorf("client %+v: want pid %d, host %s, program dlock, name \"sleep 60\"", ci, pid, host)
	}
	if started, err := time.Parse(time.RFC3339Nano, ci.Started); err != nil || time.Since(started) > time.Minute {
		t.Errorf("started %q (%v): want a recent RFC 3339 time", ci.Started, err)
	}
	if r := cliRun(t, "list", name); !strings.Contains(r.stdout, want) {
		t.Errorf("list shows\n%s\nwant %q in it", r.stdout, want)
	}
	r := cliRunEnv(t, nil, "n\n", "unlock", "--force", name)
	if !strings.Contains(r.stderr, "held by "+st.Holders[0].Owner+" ("+want) {
		t.Errorf("unlock prompt %q: want the holder %s described as %q", r.stderr, st.Holders[0].Owner, want)
	}

	// --label replaces the command.
	other := lockName(t) + ":label"
	cmd2, _, _ := dlockProcess(t, "run", "--label", "nightly report", other, "sleep", "60")
	eventually(t, 10*time.Second, func() error {
		if r := cliRun(t, "status", other); !strings.Contains(r.stdout, fmt.Sprintf(`dlock "nightly report" on %s, pid %d`, host, cmd2.Process.Pid)) {
			return fmt.Errorf("status shows\n%s", r.stdout)
		}
		return nil
	})
	for _, c := range []int{pid, cmd2.Process.Pid} {
		_ = syscall.Kill(c, syscall.SIGTERM)
	}
	exitCode(t, cmd)
	exitCode(t, cmd2)
}

// TestRecordGoneAfterCrash: when a holder is killed, its record expires
// with the watchdog timeout; a lock it took with a fixed lease outlives
// it, and status then calls the holder unknown.
func TestRecordGoneAfterCrash(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	name := lockName(t)
	cmd, vars, _ := holdProcess(t, false, "--lease", "1h", "--watchdog", "300ms", name)
	id := clientID(vars["DLOCK_OWNER"])
	awaitRecord(t, rdb, id)
	if st := statusJSON(t, name); len(st.Holders) != 1 || st.Holders[0].Client == nil ||
		st.Holders[0].Client.PID != cmd.Process.Pid || st.Holders[0].Client.Name != "hold" {
		t.Fatalf("holders %+v: want dlock hold's pid %d and label \"hold\"", st.Holders, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close
		t.Fatal(err)
	}
	exitCode(t, cmd)
	eventually(t, 10*time.Second, func() error {
		if rdb.Exists(ctx, layout.ClientRecordPrefix+id).Val() != 0 {
			return fmt.Errorf("record of killed client %s still there", id)
		}
		return nil
	})
	r := cliRun(t, "status", name)
	if !strings.Contains(r.stdout, vars["DLOCK_OWNER"]+"  1      "+unknownHolder) {
		t.Errorf("status after the holder died:\n%s\nwant it %q", r.stdout, unknownHolder)
	}
	if st := statusJSON(t, name); len(st.Holders) != 1 || st.Holders[0].Client != nil {
		t.Errorf("status --json holders %+v: want one without a client", st.Holders)
	}
}

// TestRecordDeletedAtExit: dlock hold deletes its record when it exits.
func TestRecordDeletedAtExit(t *testing.T) {
	rdb := newRedis(t)
	name := lockName(t)
	cmd, vars, _ := holdProcess(t, false, name)
	id := clientID(vars["DLOCK_OWNER"])
	awaitRecord(t, rdb, id)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("dlock hold exited %d", code)
	}
	if n := rdb.Exists(context.Background(), layout.ClientRecordPrefix+id).Val(); n != 0 {
		t.Error("record still there after dlock hold exited")
	}
}

// TestRecordUnreadable: a CLI user who may not read records sees why the
// holder is unknown; status still works.
func TestRecordUnreadable(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	name := lockName(t)
	user := "dlock-cli-norecord"
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">secret",
		"~cli:*", "~redisson_*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
	cmd, vars, _ := holdProcess(t, false, name)
	awaitRecord(t, admin, clientID(vars["DLOCK_OWNER"]))
	url := strings.Replace(redisURL, "redis://", "redis://"+user+":secret@", 1)
	r := cliRunEnv(t, map[string]string{"DLOCK_REDIS_URL": url}, "", "status", name)
	if r.code != 0 || !strings.Contains(r.stdout, "unknown (record not readable: NOPERM") {
		t.Errorf("status as %s: exit %d, stdout\n%s\nstderr %q; want the holder unknown, NOPERM", user, r.code, r.stdout, r.stderr)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exitCode(t, cmd)
}

// TestUnlockPromptListsHolders: with several holders the prompt lists
// them a line each; Redisson's are unknown.
func TestUnlockPromptListsHolders(t *testing.T) {
	prefix := "golden:prompt:"
	goldenLocks(t, prefix)
	r := cliRunEnv(t, nil, "n\n", "unlock", "--force", prefix+"rw-read")
	want := fmt.Sprintf("  %s:12 (read): %s\n  %s:57 (read): %s\nDelete lock %q, held by 2 owners? [y/N] ",
		javaOther, unknownHolder, javaClient, unknownHolder, prefix+"rw-read")
	if !strings.HasPrefix(r.stderr, want) {
		t.Errorf("prompt %q, want %q", r.stderr, want)
	}
}

// TestClientID: the client id is the owner up to its last colon.
func TestClientID(t *testing.T) {
	for owner, want := range map[string]string{
		"8c2f3b1e-7a44-4c59-9d6e-1f2a3b4c5d6e:57": "8c2f3b1e-7a44-4c59-9d6e-1f2a3b4c5d6e",
		"a:b:3": "a:b",
		"plain": "plain",
	} {
		if got := clientID(owner); got != want {
			t.Errorf("clientID(%q) = %q, want %q", owner, got, want)
		}
	}
}

// TestClientTextEscapes: control characters in a record never reach the
// terminal as such.
func TestClientTextEscapes(t *testing.T) {
	h := holder{Client: &clientInfo{Host: "h\x1b[31m", PID: 1, Program: "p\x07", Name: "n\x1b]0;x\x07", Started: "bad"}}
	got := h.clientText(time.Now(), true)
	if strings.ContainsAny(got, "\x1b\x07") {
		t.Errorf("clientText %q has control characters", got)
	}
}

// TestStatusRedLockHolder: a RedLock's Client writes its record on the
// first server only; status describes the holder on every server.
func TestStatusRedLockHolder(t *testing.T) {
	servers := redistest.NewServers(t, 3)
	var flags []string
	for _, s := range servers {
		flags = append(flags, "--redis", "redis://"+s.Addr())
	}
	name := "cli:redlock-holder"
	cmd, _, _ := holdProcess(t, false, append(flags, name)...)
	want := fmt.Sprintf(`dlock "hold" on %s, pid %d`, hostname(t), cmd.Process.Pid)
	eventually(t, 10*time.Second, func() error {
		r := cliRun(t, append(append([]string{"status"}, flags...), name)...)
		if held, described := strings.Count(r.stdout, "state  held"), strings.Count(r.stdout, want); held < 2 || described != held {
			return fmt.Errorf("status: held on %d servers, holder described on %d:\n%s", held, described, r.stdout)
		}
		r = cliRun(t, append(append([]string{"list"}, flags...), name)...)
		if held, described := strings.Count(r.stdout, name+" "), strings.Count(r.stdout, want); held < 2 || described != held {
			return fmt.Errorf("list: held on %d servers, holder described on %d:\n%s", held, described, r.stdout)
		}
		return nil
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exitCode(t, cmd)
}

// hostname is os.Hostname, which the records hold.
func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
