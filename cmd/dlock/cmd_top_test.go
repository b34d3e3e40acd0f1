package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// waitingClient starts a Lock on lock name from a Client of its own (so a
// connection of its own subscribes), stopped when the test ends. kind is
// the lock's kind: "mutex", "fair", or the "read" or "write" lock of an
// RWMutex.
func waitingClient(t *testing.T, name, kind string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(redisURL, "redis://")})
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	var l interface {
		Lock(context.Context) (context.Context, error)
	}
	switch kind {
	case "mutex":
		l, err = c.NewMutex(name)
	case "fair":
		l, err = c.NewFairMutex(name)
	case "read", "write":
		var rw *dlock.RWMutex
		if rw, err = c.NewRWMutex(name); err == nil && kind == "read" {
			l = rw.ReadLock()
		} else if err == nil {
			l = rw.WriteLock()
		}
	default:
		t.Fatalf("waitingClient: unknown kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = l.Lock(ctx) // returns when cancelled
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("a waiting %s Lock on %q did not return within 10s of its cancel", kind, name)
		}
		_ = c.Close()
		_ = rdb.Close()
	})
}

// TestTopOnce: dlock top --once lists the matching locks with their
// holder, hold count, lease and waiters, the most waited-for first; --json
// gives the same for scripts.
func TestTopOnce(t *testing.T) {
	prefix := lockName(t) + ":"
	rdb := newRedis(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	hot, _ := c.NewMutex(prefix + "hot")
	cold, _ := c.NewMutex(prefix + "cold")
	fair, _ := c.NewFairMutex(prefix + "fair")
	hotCtx := mustLock(t, hot, ctx)
	mustLock(t, hot, hotCtx) // held twice
	coldCtx := mustLock(t, cold, ctx)
	mustLock(t, fair, ctx)
	// Two processes' worth of waiters on hot, one on the fair lock.
	waitingClient(t, prefix+"hot", "mutex")
	waitingClient(t, prefix+"hot", "mutex")
	waitingClient(t, prefix+"fair", "fair")
	eventually(t, 10*time.Second, func() error {
		n := rdb.PubSubNumSub(ctx, "redisson_lock__channel:{"+prefix+"hot}").Val()["redisson_lock__channel:{"+prefix+"hot}"]
		q := rdb.LLen(ctx, "redisson_lock_queue:{"+prefix+"fair}").Val()
		if n != 2 || q != 1 {
			return fmt.Errorf("%d subscribed to hot, %d queued for fair", n, q)
		}
		return nil
	})

	awaitRecord(t, rdb, c.ID()) // the holder record, written in the background
	r := cliRun(t, "top", "--once", "--json", prefix+"*")
	if r.code != 0 {
		t.Fatalf("dlock top --once --json: exit %d, stderr %q", r.code, r.stderr)
	}
	var rows []topLock
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("%v in %s", err, r.stdout)
	}
	var got []string
	for _, l := range rows {
		got = append(got, fmt.Sprintf("%s %s holds=%d waiters=%d ttl>0=%v", strings.TrimPrefix(l.Name, prefix), l.Kind, l.Holds, l.Waiters, l.TTL != nil && *l.TTL > 0))
	}
	// dlock counts re-entries in the Client: Redis stores 1 per owner.
	want := []string{
		"hot mutex holds=1 waiters=2 ttl>0=true",
		"fair fair holds=1 waiters=1 ttl>0=true",
		"cold mutex holds=1 waiters=0 ttl>0=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rows[0].Holders[0].Owner != c.ID()+":1" {
		t.Errorf("hot's holder %q, want the first owner of client %s", rows[0].Holders[0].Owner, c.ID())
	}

	r = cliRun(t, "top", "--once", prefix+"*")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 6 {
		t.Fatalf("dlock top --once: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if !strings.Contains(lines[0], "3 locks held, 3 waiters") {
		t.Errorf("summary %q, want 3 locks held, 3 waiters", lines[0])
	}
	if !regexp.MustCompile(`^NAME +KIND +HOLDER +HOLDS +TTL +WAITERS +HELD BY$`).MatchString(lines[2]) {
		t.Errorf("header %q", lines[2])
	}
	row := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix+"hot") + ` +mutex +` + regexp.QuoteMeta(c.ID()[:8]+"…:1") + ` +1 +[0-9.]+s +2 +.* on \S+, pid ` + strconv.Itoa(os.Getpid()) + `\b`)
	if !row.MatchString(lines[3]) {
		t.Errorf("first row %q, want hot held by %s:1 with 2 waiters", lines[3], c.ID())
	}
	if err := cold.Unlock(coldCtx); err != nil {
		t.Fatal(err)
	}
	if r := cliRun(t, "top", "--once", prefix+"cold"); r.code != 0 || !strings.Contains(r.stdout, "no locks match") {
		t.Errorf("after cold's release: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestTopReadWrite: dlock top counts the waiters of a read-write lock on
// its own channel (redisson_rwlock:{name}): with the write lock held and a
// reader and a writer waiting, each from a Client of its own, it shows the
// lock in write mode with 2 waiters, its holder as the writer.
func TestTopReadWrite(t *testing.T) {
	prefix := lockName(t) + ":"
	name := prefix + "rw"
	rdb := newRedis(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	rw, err := c.NewRWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	wctx := mustLock(t, rw.WriteLock(), ctx)
	defer rw.WriteLock().Unlock(wctx)
	waitingClient(t, name, "read")
	waitingClient(t, name, "write")
	channel := "redisson_rwlock:{" + name + "}"
	eventually(t, 10*time.Second, func() error {
		if n := rdb.PubSubNumSub(ctx, channel).Val()[channel]; n != 2 {
			return fmt.Errorf("%d subscribed to %s, want the reader's and the writer's connections", n, channel)
		}
		return nil
	})

	r := cliRun(t, "top", "--once", "--json", prefix+"*")
	if r.code != 0 {
		t.Fatalf("dlock top --once --json: exit %d, stderr %q", r.code, r.stderr)
	}
	var rows []topLock
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("%v in %s", err, r.stdout)
	}
	if len(rows) != 1 || rows[0].Name != name || rows[0].Kind != "rwlock" || rows[0].Mode != "write" || rows[0].Waiters != 2 || rows[0].Holds != 1 {
		t.Fatalf("rows %s, want %s in write mode, held once, with 2 waiters", r.stdout, name)
	}

	r = cliRun(t, "top", "--once", prefix+"*")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 4 {
		t.Fatalf("dlock top --once: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if !strings.Contains(lines[0], "1 lock held, 2 waiters") {
		t.Errorf("summary %q, want 1 lock held, 2 waiters", lines[0])
	}
	row := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + ` +rwlock \(write\) +` + regexp.QuoteMeta(c.ID()[:8]+"…:1") + ` \(write\) +1 +[0-9.]+s +2 `)
	if !row.MatchString(lines[3]) {
		t.Errorf("row %q, want %s in write mode held by %s:1 (write), with 2 waiters", lines[3], name, c.ID())
	}
}

// TestTopReaders: dlock top sums the hold counts of a lock's holders (a
// read lock held by three owners holds 3), names the first and counts the
// others in HELD BY, and among locks without waiters shows the most held
// first.
func TestTopReaders(t *testing.T) {
	prefix := lockName(t) + ":"
	rdb := newRedis(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	// "a" sorts first by name: only the hold counts put "b" above it.
	m, err := c.NewMutex(prefix + "a")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.NewRWMutex(prefix + "b")
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, m, ctx)
	for range 3 { // three owners: unrelated contexts
		mustLock(t, rw.ReadLock(), ctx)
	}
	awaitRecord(t, rdb, c.ID())

	r := cliRun(t, "top", "--once", "--json", prefix+"*")
	if r.code != 0 {
		t.Fatalf("dlock top --once --json: exit %d, stderr %q", r.code, r.stderr)
	}
	var rows []topLock
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("%v in %s", err, r.stdout)
	}
	var got []string
	for _, l := range rows {
		got = append(got, fmt.Sprintf("%s %s/%s holders=%d holds=%d waiters=%d", strings.TrimPrefix(l.Name, prefix), l.Kind, l.Mode, len(l.Holders), l.Holds, l.Waiters))
	}
	want := []string{"b rwlock/read holders=3 holds=3 waiters=0", "a mutex/ holders=1 holds=1 waiters=0"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	r = cliRun(t, "top", "--once", prefix+"*")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 5 {
		t.Fatalf("dlock top --once: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	row := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix+"b") + ` +rwlock \(read\) +` + regexp.QuoteMeta(c.ID()[:8]) + `…:\d+ \(read\) +3 +[0-9.]+s +0 +.*, \+2 more$`)
	if !row.MatchString(lines[3]) {
		t.Errorf("first row %q, want the read lock held 3 times, by its first reader and 2 more", lines[3])
	}
}

func TestTopUsage(t *testing.T) {
	for _, args := range [][]string{
		{"top", "--json"},
		{"top", "a*", "b*"},
		{"top", "--interval", "1ms"},
	} {
		if r := cliRun(t, args...); r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d", args, r.code, r.stderr, exitUsage)
		}
	}
}

// tmux drives a tmux server of the test's own.
type tmux struct {
	t      *testing.T
	socket string
	target string // the session await reads
}

func newTmux(t *testing.T) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (make test installs it)")
	}
	// A socket in the test's directory: removed with it.
	tm := &tmux{t: t, socket: filepath.Join(t.TempDir(), "tmux"), target: "top"}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.socket, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %q: %v: %s", args, err, out)
	}
	return string(out)
}

// await captures the pane until it matches every pattern, and returns it.
func (tm *tmux) await(what string, patterns ...string) string {
	tm.t.Helper()
	var pane string
	deadline := time.Now().Add(15 * time.Second)
	for {
		pane = tm.run("capture-pane", "-p", "-t", tm.target)
		ok := true
		for _, p := range patterns {
			ok = ok && regexp.MustCompile(p).MatchString(pane)
		}
		if ok {
			return pane
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("pane never showed %s; last capture:\n%s", what, pane)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTopTerminal runs dlock top in a real terminal (a tmux pane) while
// dlock hold processes take, wait for and release locks, reads the
// screen, and quits it with Ctrl-C.
func TestTopTerminal(t *testing.T) {
	tm := newTmux(t)
	prefix := lockName(t) + ":"
	hot, cold := prefix+"hot", prefix+"cold"

	holder, vars, _ := holdProcess(t, false, hot)
	holdProcess(t, false, cold)
	w1, w1out, _ := dlockProcess(t, "hold", hot)
	w2, w2out, _ := dlockProcess(t, "hold", hot)

	cmd := fmt.Sprintf("env DLOCK_REDIS_URL=%s %s top --interval 200ms '%s*'; echo dlock-top-exit=$?; sleep 600", redisURL, dlockBin, prefix)
	tm.run("new-session", "-d", "-s", "top", "-x", "160", "-y", "20", cmd)

	q := regexp.QuoteMeta
	pane := tm.await("hot with its holder and 2 waiters above cold",
		`2 locks held, 2 waiters`,
		`(?s)`+q(hot)+` +mutex +`+q(short(vars["DLOCK_OWNER"]))+` +1 +[0-9.]+s +2 +dlock "hold" on \S+, pid `+strconv.Itoa(holder.Process.Pid)+`\b[^\n]*\n`+q(cold)+` +mutex +\S+ +1 +[0-9.]+s +0`)
	t.Logf("pane with two waiters:\n%s", pane)

	// The holder ends its hold: a waiter takes the lock, one waits on.
	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, holder); code != 0 {
		t.Fatalf("holder exit %d", code)
	}
	var next string
	eventually(t, 10*time.Second, func() error {
		for _, out := range []*syncBuffer{w1out, w2out} {
			if m := regexp.MustCompile(`DLOCK_OWNER=(\S+)`).FindStringSubmatch(out.String()); m != nil {
				next = m[1]
				return nil
			}
		}
		return fmt.Errorf("no waiter holds the lock yet")
	})
	pane = tm.await("hot with the new holder and 1 waiter",
		`2 locks held, 1 waiter\b`,
		q(hot)+` +mutex +`+q(short(next))+` +1 +[0-9.]+s +1`)
	t.Logf("pane after the hand-over:\n%s", pane)

	// Ctrl-C ends dlock top with status 0 and gives the screen back.
	tm.run("send-keys", "-t", "top", "C-c")
	pane = tm.await("dlock top's exit", `dlock-top-exit=0`)
	if strings.Contains(pane, "WAITERS") {
		t.Errorf("the view stayed on screen after exit (alternate screen not left):\n%s", pane)
	}
	// q quits too.
	tm.run("new-session", "-d", "-s", "q", "-x", "160", "-y", "20", cmd)
	tm.target = "q"
	tm.await("the view again", q(hot))
	tm.run("send-keys", "-t", "q", "q")
	pane = tm.await("dlock top's exit on q", `dlock-top-exit=0`)
	if strings.Contains(pane, "WAITERS") {
		t.Errorf("the view stayed on screen after q:\n%s", pane)
	}
	for _, w := range []*exec.Cmd{w1, w2} {
		_ = w.Process.Signal(syscall.SIGTERM)
		exitCode(t, w)
	}
}

// mustLock takes l with ctx or fails the test.
func mustLock(t *testing.T, l interface {
	Lock(context.Context) (context.Context, error)
}, ctx context.Context) context.Context {
	t.Helper()
	lctx, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lctx
}

// short is how dlock top shows an owner: its client id cut to 8 digits.
func short(owner string) string { return owner[:8] + "…" + owner[36:] }
