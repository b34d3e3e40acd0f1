package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// demoMilestones are lines every demo prints, in this order.
var demoMilestones = []string{
	"== 1. Three workers, one lock",
	"worker-1  acquired ",
	"wants it: waits",
	"after the unlock, woken by the unlock message",
	"after the unlock, woken by the unlock message",
	"== 2. The watchdog renews the lease",
	"watchdog  renewed the job's lease: ",
	"watchdog  renewed the job's lease: ",
	"job       CRASHES",
	"rescuer   acquired it: the crashed job's lease ran out",
	"== 3. A fair lock: first come, first served",
	"fair-1    wants it: queues at position 1",
	"fair-3    wants it: queues at position 3",
	"fair-1    acquired it",
	"fair-2    acquired it",
	"fair-3    acquired it",
	"== 4. A read-write lock",
	"reader-2  acquired the read lock",
	"writer    wants the write lock: waits for both readers",
	"reader-2  unlocks",
	"writer    acquired the write lock: the last reader left",
	"Done in ",
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
// redis-server, shows every scene in order, says it took what its help
// says (about 6 s; at most 10 s on a loaded machine), and removes the
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
	m := regexp.MustCompile(`a throwaway redis-server on (\S+) \(removed at the end\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no server line in %q", out)
	}
	if _, err := os.Stat(filepath.Dir(m[1])); !os.IsNotExist(err) {
		t.Errorf("the demo's directory %s is still there (%v)", filepath.Dir(m[1]), err)
	}
	s := regexp.MustCompile(`Done in ([0-9.]+)s`).FindStringSubmatch(out)
	if s == nil {
		t.Fatal("no closing line")
	}
	// The scenes pace themselves: at least 4.5 s of pauses and lease
	// expiry, so "about 6 s" in the help and the README is not too low.
	// The upper bound only catches a demo that hangs.
	if secs, err := strconv.ParseFloat(s[1], 64); err != nil || secs < 4.5 || secs > 30 {
		t.Errorf("the demo took %ss; its help and the README say about %d s", s[1], demoSeconds(t))
	}
}

// TestDemoEmbedded: with no redis-server on PATH, the demo runs every
// scene on the embedded server and says so in one line, as on a machine
// where Redis was never installed.
func TestDemoEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes about 10 s")
	}
	cmd := exec.Command(dlockBin, "demo")
	// An empty directory as PATH: no redis-server to find.
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	checkDemo(t, out)
	const says = "dlock demo: no redis-server on PATH, so on an embedded Redis-compatible server (miniredis) on "
	if !strings.HasPrefix(out, says) || strings.Count(out, "embedded") != 1 {
		t.Errorf("the demo does not say once, first, that it runs on the embedded server:\n%s", out)
	}
	if stderr.String() != "" {
		t.Errorf("stderr %q", stderr.String())
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

// demoSeconds returns how long "dlock help demo" says the demo takes, and
// checks that the README's "make demo" line says the same.
func demoSeconds(t *testing.T) int {
	t.Helper()
	m := regexp.MustCompile(`in about (\d+) seconds`).FindStringSubmatch(demoUsage)
	if m == nil {
		t.Fatal("dlock help demo does not say how long the demo takes")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	r := regexp.MustCompile(`(?m)^make demo .*about (\d+) s\b`).FindSubmatch(readme)
	if r == nil || string(r[1]) != m[1] {
		t.Errorf("README's make demo line says %q seconds, dlock help demo %s", r, m[1])
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestDemoDurationDocumented: the README and the demo's help agree on how
// long the demo takes.
func TestDemoDurationDocumented(t *testing.T) {
	if n := demoSeconds(t); n < 5 || n > 8 {
		t.Errorf("dlock help demo says %d s; measured about 5 s for the scenes plus start-up", n)
	}
}
