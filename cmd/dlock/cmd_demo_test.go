package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// demoMilestones are lines every demo prints, in this order.
var demoMilestones = []string{
	"== 1. Contention: three workers, one lock",
	"worker-1    acquired ",
	"wants it: worker-1 holds it, so it waits",
	"after the unlock: woken by the unlock message",
	"== 2. The watchdog: a job longer than its lease",
	"watchdog    renewed the lease: ",
	"finished after 3.2s, still holding the lock",
	"== 3. A crashed holder",
	"crasher     CRASHES",
	"after the crash: the lease ran out",
	"== 4. Fair lock: first come, first served",
	"fair-1      acquired it (turn 1)",
	"fair-2      acquired it (turn 2)",
	"fair-3      acquired it (turn 3)",
	"== 5. Read-write lock: readers share, a writer waits",
	"reader-2    acquired the read lock too: two readers at once",
	"writer      wants the write lock: waits for both readers",
	"writer      acquired the write lock: the last reader left",
	"reader-3    acquired the read lock after the writer",
	"Summary (",
	"The fair lock served its waiters in the order they came: fair-1, fair-2, fair-3.",
}

// checkDemo checks that out has the milestones in order.
func checkDemo(t *testing.T, out string) {
	t.Helper()
	rest := out
	for _, m := range demoMilestones {
		i := strings.Index(rest, m)
		if i < 0 {
			t.Fatalf("demo output lacks %q (in order); output:\n%s", m, out)
		}
		rest = rest[i+len(m):]
	}
}

// TestDemo runs "dlock demo" as make demo does: it starts its own
// redis-server, shows every scene in order within 20 s, and removes the
// server and its directory at the end.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes about 10 s")
	}
	cmd, stdout, stderr := dlockProcess(t, "demo")
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	out := stdout.String()
	checkDemo(t, out)
	if stderr.String() != "" {
		t.Errorf("stderr %q", stderr)
	}
	m := regexp.MustCompile(`a throwaway redis-server on (\S+) \(data in (\S+),`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no server line in %q", out)
	}
	if _, err := os.Stat(m[2]); !os.IsNotExist(err) {
		t.Errorf("the demo's directory %s is still there (%v)", m[2], err)
	}
	if answers(m[1]) {
		t.Errorf("the demo's redis-server on %s still answers", m[1])
	}
	s := regexp.MustCompile(`Summary \(([0-9.]+)s\)`).FindStringSubmatch(out)
	if s == nil {
		t.Fatal("no summary line")
	}
	if secs, err := strconv.ParseFloat(s[1], 64); err != nil || secs >= 20 {
		t.Errorf("the demo took %ss, want under 20 s", s[1])
	}
}

// TestDemoOnGivenRedis runs the demo on the test server with --redis and
// checks it leaves no key behind.
func TestDemoOnGivenRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes about 10 s")
	}
	r := cliRun(t, "demo", "--redis", redisURL)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	checkDemo(t, r.stdout)
	keys, _, err := newRedis(t).Scan(t.Context(), 0, demoPrefix+"*", 10000).Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys left behind: %q, %v", keys, err)
	}
}
