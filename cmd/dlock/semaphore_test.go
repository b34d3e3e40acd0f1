package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// semChannel is the channel a permit semaphore's waiters subscribe to.
func semChannel(name string) string { return layout.Prefixed(layout.SemChannelPrefix, name) }

// awaitSubscribers waits until n processes listen on channel.
func awaitSubscribers(t *testing.T, rdb *redis.Client, channel string, n int64) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		got, err := rdb.PubSubNumSub(t.Context(), channel).Result()
		if err != nil {
			return err
		}
		if got[channel] != n {
			return fmt.Errorf("%d subscribers on %s, want %d", got[channel], channel, n)
		}
		return nil
	})
}

// permitScript is a COMMAND that appends "start ID" to a log, waits until a
// release file exists, and appends "end ID".
const permitScript = `echo "start $1" >> "$2"; while [ ! -e "$3" ]; do sleep 0.02; done; echo "end $1" >> "$2"`

// TestRunPermitsOneExcludes: two dlock run --permits 1 processes on one
// semaphore: the second waits, subscribed, while the first one's COMMAND
// runs, and runs its COMMAND after the first is done; the semaphore is
// set to one permit by whichever came first and ends with it free.
func TestRunPermitsOneExcludes(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	log, release := filepath.Join(dir, "log"), filepath.Join(dir, "release")
	rdb := newRedis(t)

	first, _, firstErr := dlockProcess(t, "run", "--permits", "1", name, "sh", "-c", permitScript, "sh", "A", log, release)
	eventually(t, 10*time.Second, fileHas(log, "start A"))
	second, _, secondErr := dlockProcess(t, "run", "--permits", "1", "-w", "1m", name, "sh", "-c", permitScript, "sh", "B", log, release)
	awaitSubscribers(t, rdb, semChannel(name), 1)
	if b, _ := os.ReadFile(log); string(b) != "start A\n" {
		t.Fatalf("while A holds the only permit the log is %q, want only A's start", b)
	}
	if n, err := rdb.ZCard(t.Context(), layout.Suffixed(name, "timeout")).Result(); err != nil || n != 1 {
		t.Errorf("permits held while A runs: %d (%v), want 1", n, err)
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
	if b, _ := os.ReadFile(log); string(b) != "start A\nend A\nstart B\nend B\n" {
		t.Errorf("log %q: want A, then B", b)
	}
	if v, err := rdb.Get(t.Context(), name).Result(); err != nil || v != "1" {
		t.Errorf("available permits after both: %q (%v), want 1", v, err)
	}
	if exists(t, rdb, layout.Suffixed(name, "timeout")) {
		t.Error("permits still held after both runs")
	}
}

// TestRunPermitsTwoAtOnce: with --permits 2 two COMMANDs run at once, and
// a third dlock with -n finds no permit and exits with -E's status
// without running its COMMAND.
func TestRunPermitsTwoAtOnce(t *testing.T) {
	name := lockName(t)
	dir := t.TempDir()
	log, release := filepath.Join(dir, "log"), filepath.Join(dir, "release")

	a, _, aErr := dlockProcess(t, "run", "--permits", "2", name, "sh", "-c", permitScript, "sh", "A", log, release)
	b, _, bErr := dlockProcess(t, "run", "--permits", "2", name, "sh", "-c", permitScript, "sh", "B", log, release)
	eventually(t, 10*time.Second, fileHas(log, "start A"))
	eventually(t, 10*time.Second, fileHas(log, "start B"))

	r := cliRun(t, "run", "--permits", "2", "-n", "-E", "75", name, "sh", "-c", `echo "start C" >> "$1"`, "sh", log)
	if want := fmt.Sprintf("dlock: semaphore %q has no permit available (-n)\n", name); r.code != 75 || r.stderr != want {
		t.Errorf("third run -n -E 75: exit %d, stderr %q; want 75, %q", r.code, r.stderr, want)
	}
	r = cliRun(t, "run", "--permits", "2", "-w", "100ms", name, "true")
	if want := fmt.Sprintf("dlock: no permit of semaphore %q within --wait 100ms\n", name); r.code != exitNotObtained || r.stderr != want {
		t.Errorf("third run -w 100ms: exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitNotObtained, want)
	}

	// status while both hold one.
	r = cliRun(t, "status", name)
	if r.code != 0 || !strings.Contains(r.stdout, "permits    0 available, 2 in use\n") || strings.Count(r.stdout, unknownPermitHolder) != 2 {
		t.Errorf("status while two hold permits: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, a); code != 0 {
		t.Errorf("A: exit %d, stderr %q", code, aErr)
	}
	if code := exitCode(t, b); code != 0 {
		t.Errorf("B: exit %d, stderr %q", code, bErr)
	}
	if got, _ := os.ReadFile(log); strings.Contains(string(got), "start C") {
		t.Errorf("the third COMMAND ran without a permit: log %q", got)
	}
}

// TestRunPermitEnvironment: COMMAND gets DLOCK_NAME and DLOCK_PERMIT, the
// id of the permit it runs under as Redis has it, and no inherited
// DLOCK_OWNER.
func TestRunPermitEnvironment(t *testing.T) {
	name := lockName(t)
	t.Setenv("DLOCK_OWNER", "inherited")
	script := `printf '%s|%s|%s|' "$DLOCK_NAME" "$DLOCK_PERMIT" "$DLOCK_OWNER"; redis-cli -u "$1" --no-raw zrange "{$DLOCK_NAME}:timeout" 0 -1 | wc -l`
	r := cliRun(t, "run", "--permits", "3", name, "sh", "-c", script, "sh", redisURL)
	got := strings.Split(strings.TrimSpace(r.stdout), "|")
	if r.code != 0 || len(got) != 4 {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got[0] != name || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got[1]) || got[2] != "" || strings.TrimSpace(got[3]) != "1" {
		t.Errorf("DLOCK_NAME=%q DLOCK_PERMIT=%q DLOCK_OWNER=%q, permits held %q; want %q, 32 hex digits, empty, 1", got[0], got[1], got[2], got[3], name)
	}
	// The semaphore was set to --permits 3, and the permit went back when
	// COMMAND was done.
	rdb := newRedis(t)
	if v := rdb.Get(t.Context(), name).Val(); v != "3" {
		t.Errorf("available permits after the run: %q, want 3", v)
	}
	if exists(t, rdb, layout.Suffixed(name, "timeout")) {
		t.Error("a permit is still held after the run")
	}
}

// TestRunPermitLease: --permit-lease D takes the permit with a fixed lease
// of D (the expiry is the server's now plus D), --permit-lease none one
// without lease (Redisson's no-expiry score); either is given back when
// COMMAND is done. Bad values and combinations are usage errors.
func TestRunPermitLease(t *testing.T) {
	name := lockName(t)
	// Prints the lease left of the one permit held, in ms on the server's
	// clock, or the no-expiry score.
	script := `redis-cli -u "$1" eval "local z = redis.call('zrange', KEYS[1], 0, -1, 'WITHSCORES')
if z[2] == '922337203685477' then return z[2] end
local t = redis.call('time')
return tonumber(z[2]) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))" 1 "{$DLOCK_NAME}:timeout"`
	r := cliRun(t, "run", "--permits", "2", "--permit-lease", "1m", name, "sh", "-c", script, "sh", redisURL)
	left, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if r.code != 0 || err != nil || left <= 50_000 || left > 60_000 {
		t.Fatalf("--permit-lease 1m: exit %d, lease left %q ms (stderr %q); want (50000, 60000]", r.code, r.stdout, r.stderr)
	}
	r = cliRun(t, "run", "--permits", "2", "--permit-lease", "none", name, "sh", "-c", script, "sh", redisURL)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "922337203685477" {
		t.Fatalf("--permit-lease none: exit %d, score %q (stderr %q); want 922337203685477", r.code, r.stdout, r.stderr)
	}
	rdb := newRedis(t)
	if v := rdb.Get(t.Context(), name).Val(); v != "2" || exists(t, rdb, layout.Suffixed(name, "timeout")) {
		t.Errorf("after the runs: %q permits available, or a permit still held; want 2, none", v)
	}
	for _, args := range [][]string{
		{"--permit-lease", "1m"},                                    // without --permits
		{"--permits", "2", "--permit-lease", "0s"},                  // not positive
		{"--permits", "2", "--permit-lease", "forever"},             // not a duration
		{"--permits", "2", "--permit-lease", "1m", "--lease", "1m"}, // both
	} {
		r := cliRun(t, append(append([]string{"run"}, args...), name, "true")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--permit-lease") {
			t.Errorf("run %v: exit %d, stderr %q; want %d naming --permit-lease", args, r.code, r.stderr, exitUsage)
		}
	}
}

// TestRunPermitLostStopsCommand: a permit taken back while COMMAND runs
// (here deleted; a short --watchdog so the renewal finds out soon) stops
// COMMAND, and dlock exits 6 naming the semaphore.
func TestRunPermitLostStopsCommand(t *testing.T) {
	name := lockName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	script := `trap 'echo terminated >> "$1"; exit 0' TERM; echo started >> "$1"; while :; do sleep 0.05; done`
	cmd, _, stderr := dlockProcess(t, "run", "--permits", "1", "--watchdog", "300ms", name, "sh", "-c", script, "sh", marks)
	eventually(t, 10*time.Second, fileHas(marks, "started"))
	if err := newRedis(t).Del(t.Context(), layout.Suffixed(name, "timeout")).Err(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != exitLockLost {
		t.Errorf("exit %d, want %d; stderr %q", code, exitLockLost, stderr)
	}
	if b, _ := os.ReadFile(marks); string(b) != "started\nterminated\n" {
		t.Errorf("COMMAND's marks %q: want it started and then got SIGTERM", b)
	}
	if want := fmt.Sprintf("dlock: a permit of semaphore %q was lost while sh ran; sh was stopped (it exited with status 0)", name); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q\nwant it to contain %q", stderr, want)
	}
}

// TestRunPermitsOtherTotal: a semaphore that exists is used as it is; a
// different --permits is reported, not applied.
func TestRunPermitsOtherTotal(t *testing.T) {
	name := lockName(t)
	if r := cliRun(t, "run", "--permits", "2", name, "true"); r.code != 0 || r.stderr != "" {
		t.Fatalf("first run: exit %d, stderr %q", r.code, r.stderr)
	}
	r := cliRun(t, "run", "--permits", "5", name, "true")
	if want := fmt.Sprintf("dlock: semaphore %q already has 2 permits (2 available, 0 in use), not --permits 5; using it as it is\n", name); r.code != 0 || r.stderr != want {
		t.Errorf("run --permits 5: exit %d, stderr %q; want 0, %q", r.code, r.stderr, want)
	}
	if v := newRedis(t).Get(t.Context(), name).Val(); v != "2" {
		t.Errorf("available permits: %q, want 2", v)
	}
}

// TestRunPermitsUsage: --permits needs a positive count and excludes the
// lock-only flags.
func TestRunPermitsUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--permits", "0"}, "run: --permits must be at least 1"},
		{[]string{"--permits", "x"}, `invalid value "x" for flag --permits: not a whole number`},
		{[]string{"--permits", "2", "--kind", "read"}, "run: --permits takes a permit of a semaphore; --kind read names a lock"},
		{[]string{"--permits", "2", "--fencing"}, "run: --fencing is for locks"},
	} {
		r := cliRun(t, append(append([]string{"run"}, tc.args...), "sem", "true")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("run %q: exit %d, stderr %q; want %d, %q", tc.args, r.code, r.stderr, exitUsage, tc.msg)
		}
	}
}

// Permit ids as a Java client would write them: 16 raw bytes.
var (
	javaPermit1 = strings.Repeat("\x01\x23\x45\x67", 4)
	javaPermit2 = strings.Repeat("\x89\xab\xcd\xef", 4)
	javaPermit3 = strings.Repeat("\xfe\xdc\xba\x98", 4)
)

// goldenSemaphores writes, in Redisson's layouts, a permit semaphore of 5
// with three permits held (one with an hour's lease, one without lease,
// one expired and not reclaimed yet) and a counting semaphore of 4.
func goldenSemaphores(t *testing.T, prefix string) {
	t.Helper()
	ctx := t.Context()
	rdb := newRedis(t)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "*"+prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	now := time.Now()
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, prefix+"permits", 2, 0)
		p.ZAdd(ctx, layout.Suffixed(prefix+"permits", "timeout"),
			redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: javaPermit1},
			redis.Z{Score: noExpiryScore, Member: javaPermit2},
			redis.Z{Score: float64(now.Add(-time.Hour).UnixMilli()), Member: javaPermit3})
		p.Set(ctx, prefix+"counting", 4, 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// expiredTTL is the negative ttl_ms of an expired permit, which varies.
var expiredTTL = regexp.MustCompile(`("ttl_ms": )-[0-9]{2,}`)

// TestStatusSemaphoreGolden compares dlock status of a permit semaphore
// and of a counting semaphore, as a table and as JSON, and dlock list of
// both, with testdata/*.golden.
func TestStatusSemaphoreGolden(t *testing.T) {
	prefix := "golden:sem:"
	goldenSemaphores(t, prefix)
	for _, name := range []string{"permits", "counting"} {
		for _, format := range []string{"", "--json"} {
			args := []string{"status", prefix + name}
			file := "status_sem_" + name
			if format != "" {
				args = append(args, format)
				file += ".json"
			}
			r := cliRun(t, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("dlock %v: exit %d, stderr %q", args, r.code, r.stderr)
			}
			checkGolden(t, file, expiredTTL.ReplaceAllString(r.stdout, "${1}-<t>"))
		}
	}
	r := cliRun(t, "list", prefix+"*")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("list: exit %d, stderr %q", r.code, r.stderr)
	}
	checkGolden(t, "list_sem", r.stdout)
}

// TestGlobMatch checks the Redis glob rules list applies to semaphore
// names.
func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"jobs:*", "jobs:a/b", true},
		{"jobs:*", "job", false},
		{"j?bs", "jobs", true},
		{"j?bs", "jbs", false},
		{"[a-c]x", "bx", true},
		{"[^a-c]x", "bx", false},
		{"[^a-c]x", "dx", true},
		{"[xy]", "y", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"*:crawl*", "fleet:crawlers", true},
		{"*a*b", "xaxxbyb", true},
		{"*a*b", "xaxxby", false},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// TestSemaphoreName maps permit set keys back to semaphore names.
func TestSemaphoreName(t *testing.T) {
	for key, want := range map[string]string{
		"{crawl}:timeout":      "crawl",
		"{a}b:timeout":         "{a}b",
		"crawl:timeout":        "",
		"{crawl}:other":        "",
		"{}:timeout":           "",
		"x{a}{b}:timeout":      "x{a}{b}",
		"redisson:x:timeout":   "",
		"{jobs:daily}:timeout": "jobs:daily",
	} {
		if got := semaphoreName(key); got != want {
			t.Errorf("semaphoreName(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestUnlockSemaphore: unlock --force refuses a semaphore, which is not a
// lock, and leaves it alone.
func TestUnlockSemaphore(t *testing.T) {
	prefix := "golden:unlocksem:"
	goldenSemaphores(t, prefix)
	r := cliRun(t, "unlock", "--force", "--yes", prefix+"permits")
	if want := `dlock: unlock: "` + prefix + `permits" is a semaphore, not a lock`; r.code != exitFailure || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitFailure, want)
	}
	if !exists(t, newRedis(t), layout.Suffixed(prefix+"permits", "timeout")) {
		t.Error("the semaphore's permits were deleted")
	}
}

// TestRunPermitCrashedHolder: the permit of a dlock that was killed
// (SIGKILL: no release) comes back when its lease runs out, and a waiting
// dlock run then gets it: the cap survives a crash without leaking the
// permit.
func TestRunPermitCrashedHolder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("COMMAND outlives a killed dlock without Linux's parent-death signal")
	}
	name := lockName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	crashed, _, _ := dlockProcess(t, "run", "--permits", "1", "--watchdog", "1s", name, "sh", "-c", `echo first >> "$1"; exec sleep 600`, "sh", marks)
	eventually(t, 10*time.Second, fileHas(marks, "first"))
	// The child, exec'd sleep, gets SIGKILL with dlock (Linux's
	// parent-death signal); WaitDelay bounds the wait for its stdout.
	crashed.WaitDelay = 5 * time.Second
	if err := crashed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = crashed.Wait()
	if !exists(t, newRedis(t), layout.Suffixed(name, "timeout")) {
		t.Fatal("the killed dlock's permit is gone at once; want it held until its lease runs out")
	}
	r := cliRun(t, "run", "--permits", "1", "-w", "20s", name, "sh", "-c", `echo second >> "$1"`, "sh", marks)
	if r.code != 0 {
		t.Fatalf("second run: exit %d, stderr %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(marks); string(b) != "first\nsecond\n" {
		t.Errorf("marks %q", b)
	}
}
