package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestUnreachableServer: a port nobody listens on gives exit 4 and one
// line naming the URL, with the password masked.
func TestUnreachableServer(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("redis://alice:hunter2@127.0.0.1:%d", port)
	for _, args := range [][]string{
		{"status", "--redis", url, "x"},
		{"run", "--redis", url, "x", "--", "true"},
	} {
		r := cliRun(t, args...)
		want := fmt.Sprintf("dlock: cannot reach Redis at redis://alice:xxxxx@127.0.0.1:%d: dial tcp 127.0.0.1:%d: connect: connection refused\n", port, port)
		if r.code != exitUnreachable || r.stderr != want {
			t.Errorf("dlock %s: exit %d, stderr %q; want %d, %q", args[0], r.code, r.stderr, exitUnreachable, want)
		}
	}
}

// TestWrongPassword: a server with a password refuses a wrong one, a
// missing one and an unknown user with exit 5; the password given is never
// printed. The right password works.
func TestWrongPassword(t *testing.T) {
	srv := redistest.NewServer(t)
	if _, err := srv.Do(t.Context(), "CONFIG", "SET", "requirepass", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ url, msg string }{
		{"redis://:wrong-pw@" + srv.Addr(), "refused the credentials: WRONGPASS"},
		{"redis://bob:wrong-pw@" + srv.Addr(), "refused the credentials: WRONGPASS"},
		{"redis://" + srv.Addr(), "refused the credentials: NOAUTH"},
		{srv.Addr(), "refused the credentials: NOAUTH"},
	} {
		r := cliRunEnv(t, map[string]string{"DLOCK_REDIS_URL": tc.url}, "", "status", "x")
		if r.code != exitAuth || !strings.Contains(r.stderr, tc.msg) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.url, r.code, r.stderr, exitAuth, tc.msg)
		}
		if strings.Contains(r.stderr, "wrong-pw") {
			t.Errorf("%s: the password is in the output: %q", tc.url, r.stderr)
		}
	}
	r := cliRun(t, "run", "--redis", "redis://:s3cret-pw@"+srv.Addr(), "-v", "x", "--", "true")
	if r.code != 0 {
		t.Errorf("right password: exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr+r.stdout, "s3cret-pw") {
		t.Errorf("the password is in the output: %q", r.stderr)
	}
}

// TestPasswordNeverPrinted feeds URLs with passwords to every error path
// that quotes a URL and checks the password never shows.
func TestPasswordNeverPrinted(t *testing.T) {
	for _, url := range []string{
		"redis://u:Pa55word@h:1?bogus=1",
		"redis://u:Pa55word@h:1/x",
		"redis://u:Pa55word@h:1?cluster=maybe",
		"redis://u:Pa55word@h:1?master_name=m&password=Pa55word&bogus=1",
		"redis://u:Pa55word@h:1?master_name=m&route_randomly=true",
		"redis://u:Pa55/word@h:1",
		"redis://u:Pa55word@h:bad",
		"redis://u:Pa55%word@h:1",
	} {
		r := cliRun(t, "status", "--redis", url, "x")
		if r.code != exitUsage {
			t.Errorf("%s: exit %d, want %d", url, r.code, exitUsage)
		}
		if strings.Contains(r.stderr, "Pa55") {
			t.Errorf("%s: the password is in the output: %q", url, r.stderr)
		}
	}
}

// TestClusterAndSentinelURLs runs dlock run and status through a cluster
// URL (seeds as addr= parameters) and a sentinel URL (master_name).
func TestClusterAndSentinelURLs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and a sentinel group")
	}
	cluster := redistest.NewCluster(t)
	sentinel := redistest.NewSentinel(t)
	addrs := cluster.Addrs()
	clusterURL := "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	sentinels := sentinel.SentinelAddrs()
	sentinelURL := "redis://" + sentinels[0] + "?master_name=" + sentinel.MasterName() + "&addr=" + sentinels[1]
	for _, tc := range []struct{ what, url string }{
		{"cluster", clusterURL},
		{"cluster, one seed", "redis://" + addrs[3] + "?cluster=true"},
		{"sentinel", sentinelURL},
	} {
		t.Run(tc.what, func(t *testing.T) {
			env := map[string]string{"DLOCK_REDIS_URL": tc.url}
			name := "cli:{" + strings.ReplaceAll(tc.what, " ", "-") + "}:job"
			// COMMAND runs dlock status and list while dlock run holds
			// the lock.
			script := `"$1" status --redis "$2" "$3" && "$1" list --redis "$2" 'cli:*'`
			r := cliRunEnv(t, env, "", "run", name, "--", "sh", "-c", script, "sh", dlockBin, tc.url, name)
			if r.code != 0 {
				t.Fatalf("run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			for _, want := range []string{"state  held, lease left", "HOLDER", "\n" + name + "  mutex  1 "} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("status and list while held: %q\nwant %q in it", r.stdout, want)
				}
			}
			r = cliRunEnv(t, env, "", "list", "cli:*")
			if r.code != 0 || r.stdout != `no locks match "cli:*"`+"\n" {
				t.Errorf("list after run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// TestRedisURLFromEnvironment: without --redis, DLOCK_REDIS_URL is used,
// else REDIS_URL, else 127.0.0.1:6379; an unreachable URL shows which one
// was taken.
func TestRedisURLFromEnvironment(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	nowhere := fmt.Sprintf("redis://127.0.0.1:%d", port)
	for _, tc := range []struct {
		env  map[string]string
		code int
	}{
		{map[string]string{"DLOCK_REDIS_URL": "", "REDIS_URL": redisURL}, 0},
		{map[string]string{"DLOCK_REDIS_URL": redisURL, "REDIS_URL": nowhere}, 0},
		{map[string]string{"DLOCK_REDIS_URL": nowhere, "REDIS_URL": redisURL}, exitUnreachable},
		{map[string]string{"DLOCK_REDIS_URL": "", "REDIS_URL": nowhere}, exitUnreachable},
	} {
		r := cliRunEnv(t, tc.env, "", "status", "x")
		if r.code != tc.code || (tc.code != 0 && !strings.Contains(r.stderr, nowhere)) {
			t.Errorf("env %v: exit %d, stderr %q; want %d", tc.env, r.code, r.stderr, tc.code)
		}
	}
}

// TestMissingDatabase: a URL naming a database the server does not have
// is a usage error that says so, not "unreachable".
func TestMissingDatabase(t *testing.T) {
	r := cliRun(t, "status", "--redis", redisURL+"/99", "x")
	want := fmt.Sprintf("dlock: Redis at %s/99 has no database 99 (the server's \"databases\" setting is lower;", redisURL)
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitUsage, want)
	}
	if r := cliRun(t, "status", "--redis", redisURL+"/15", "x"); r.code != 0 {
		t.Errorf("database 15: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestVersionFlags: --version and -V print what dlock version prints.
func TestVersionFlags(t *testing.T) {
	want := cliRun(t, "version")
	for _, args := range [][]string{{"--version"}, {"-V"}, {"-version"}, {"--version", "--json"}} {
		r := cliRun(t, args...)
		if args[len(args)-1] == "--json" {
			if r.code != 0 || !strings.Contains(r.stdout, `"version": `) {
				t.Errorf("dlock %v: exit %d, stdout %q", args, r.code, r.stdout)
			}
			continue
		}
		if r.code != 0 || r.stdout != want.stdout || !strings.HasPrefix(r.stdout, "dlock ") {
			t.Errorf("dlock %v: exit %d, stdout %q; want %q", args, r.code, r.stdout, want.stdout)
		}
	}
}
