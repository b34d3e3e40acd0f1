package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestBadArguments checks that every kind of bad invocation exits 2 with
// one line on stderr that says what is wrong, before any contact with
// Redis (the URL points nowhere).
func TestBadArguments(t *testing.T) {
	env := map[string]string{"DLOCK_REDIS_URL": "redis://127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"frobnicate"}, `dlock: unknown command "frobnicate"; run "dlock help"`},
		{[]string{"help", "frobnicate"}, `dlock: unknown command or help topic "frobnicate"`},
		{[]string{"run"}, "dlock: run: missing lock NAME"},
		{[]string{"run", "x"}, `dlock: run: missing COMMAND after NAME "x"`},
		{[]string{"run", "x", "--"}, `dlock: run: missing COMMAND after NAME "x"`},
		{[]string{"run", "x", "--wait", "1s", "--", "true"}, `dlock: run: --wait after NAME "x": flags go before NAME`},
		{[]string{"run", "x", "-v", "true"}, `dlock: run: -v after NAME "x": flags go before NAME`},
		{[]string{"run", "x", "-c"}, "dlock: run: -c takes one argument, the shell command; got 0"},
		{[]string{"run", "x", "-c", "true", "extra"}, "dlock: run: -c takes one argument, the shell command; got 2"},
		{[]string{"run", "-c", "true", "x", "-c", "true"}, "dlock: run: -c given twice"},
		{[]string{"run", "-c", "true", "x", "echo"}, `dlock: run: both -c and COMMAND given ("echo")`},
		{[]string{"run", "-n", "-w", "1s", "x", "true"}, "dlock: run: -n (--nonblock) and -w (--wait) cannot be combined"},
		{[]string{"run", "-E", "256", "x", "true"}, "dlock: run: --conflict-exit-code 256 is outside 0..255"},
		{[]string{"run", "-E", "x", "y", "true"}, `dlock: run: invalid value "x" for flag -E`},
		{[]string{"hold"}, "dlock: hold: one lock NAME expected, got 0 arguments"},
		{[]string{"hold", "a", "b"}, "dlock: hold: one lock NAME expected, got 2 arguments"},
		{[]string{"hold", "-n", "--wait", "1s", "x"}, "dlock: hold: -n (--nonblock) and -w (--wait) cannot be combined"},
		{[]string{"hold", "--lease", "0", "x"}, "dlock: hold: --lease must be positive"},
		{[]string{"hold", "--kind", "spin", "x"}, `hold: invalid option: unknown kind "spin"`},
		{[]string{"hold", "--grace", "1s", "x"}, "dlock: hold: flag provided but not defined: --grace"},
		{[]string{"run", "--wait", "soon", "x", "--", "true"}, `dlock: run: invalid value "soon" for flag --wait: not a duration (seconds like 5 or 0.5, or 500ms, 10s, 2m): "soon"`},
		{[]string{"run", "--wait", "-1s", "x", "--", "true"}, "negative duration -1s"},
		{[]string{"run", "-w", "-2", "x", "--", "true"}, "negative duration -2s"},
		{[]string{"run", "-w", "5x", "x", "--", "true"}, `dlock: run: invalid value "5x" for flag -w: not a duration`},
		{[]string{"run", "-w", "NaN", "x", "--", "true"}, `dlock: run: invalid value "NaN" for flag -w: not a duration`},
		{[]string{"run", "-w", "0x10", "x", "--", "true"}, `dlock: run: invalid value "0x10" for flag -w: not a duration`},
		{[]string{"run", "-w", "1e10", "x", "--", "true"}, `dlock: run: invalid value "1e10" for flag -w: duration "1e10" is too long`},
		{[]string{"run", "--lease", "x", "x", "--", "true"}, `dlock: run: invalid value "x" for flag --lease: not a duration`},
		{[]string{"run", "-s", "-x", "x", "--", "true"}, "dlock: run: -s (--shared) and -x (--exclusive) cannot be combined"},
		{[]string{"hold", "--shared", "--kind", "read", "x"}, "dlock: hold: -s and -x choose the kind (read, write); give them without --kind"},
		{[]string{"run", "-x", "--permits", "2", "x", "--", "true"}, "dlock: run: --permits takes a permit of a semaphore; -x names a lock"},
		{[]string{"run", "-s", "--redis", "a:1", "--redis", "b:1", "--redis", "c:1", "x", "--", "true"}, "several --redis make a RedLock, which is a mutex; --kind read needs one Redis deployment"},
		{[]string{"run", "--lease", "0", "x", "--", "true"}, "dlock: run: --lease must be positive"},
		{[]string{"run", "--grace", "-1s", "x", "--", "true"}, `dlock: run: invalid value "-1s" for flag --grace: negative duration -1s`},
		{[]string{"run", "--kind", "spin", "x", "--", "true"}, `run: invalid option: unknown kind "spin" (want mutex, fair, read, write)`},
		{[]string{"run", "--watchdog", "1ms", "x", "--", "true"}, "dlock: invalid option: watchdog timeout 1ms is outside [30ms, 720h0m0s]"},
		{[]string{"run", "--lease", "1000000h", "x", "--", "true"}, "dlock: run: invalid option: lease 1000000h0m0s is outside"},
		{[]string{"run", "a}b", "--", "true"}, `dlock: run: invalid lock name: "a}b"`},
		{[]string{"run", "", "--", "true"}, "dlock: run: invalid lock name: empty name"},
		{[]string{"run", "--nope", "x", "--", "true"}, "dlock: run: flag provided but not defined: --nope"},
		{[]string{"run", "--wait"}, "dlock: run: flag needs an argument: --wait"},
		{[]string{"status"}, "dlock: status: one lock NAME expected, got 0 arguments"},
		{[]string{"status", "a", "b"}, "dlock: status: one lock NAME expected, got 2 arguments"},
		{[]string{"status", "x{}"}, `dlock: status: invalid lock name: "x{}"`},
		{[]string{"status", "--json=maybe", "x"}, `invalid boolean value "maybe" for --json`},
		{[]string{"list", "a*", "b*"}, "dlock: list: at most one PATTERN expected, got 2 arguments"},
		{[]string{"unlock", "x"}, "dlock: unlock: --force is required"},
		{[]string{"unlock", "--force"}, "dlock: unlock: one lock NAME expected, got 0 arguments"},
		{[]string{"version", "extra"}, `dlock: version: unexpected argument "extra"`},
		{[]string{"status", "--redis", "foo://h:1", "x"}, "dlock: invalid Redis URL foo://h:1: redis: invalid URL scheme: foo"},
		{[]string{"status", "--redis", "redis://h:1?bogus=1", "x"}, "dlock: invalid Redis URL redis://h:1?bogus=1: redis: unexpected option: bogus"},
		{[]string{"status", "--redis", "redis://h:1/notadb", "x"}, `redis: invalid database number: "notadb"`},
		{[]string{"status", "--redis", "redis://u:p%zz@h:1", "x"}, "dlock: invalid Redis URL: it does not parse as a URL"},
		{[]string{"status", "--redis", "redis://127.0.0.1:notaport", "x"}, `dlock: invalid Redis URL: port "notaport" is not a number`},
		{[]string{"status", "--redis", "127.0.0.1:notaport", "x"}, `dlock: invalid Redis URL: port "notaport" is not a number`},
		{[]string{"status", "--redis", "redis://u:pw@h:6379x/0", "x"}, `dlock: invalid Redis URL: port "6379x" is not a number`},
		{[]string{"status", "--redis", "redis://[::1]:x", "x"}, `dlock: invalid Redis URL: port "x" is not a number`},
		{[]string{"status", "--redis", "redis://h:70000", "x"}, "dlock: invalid Redis URL: port 70000 is outside 1..65535"},
		{[]string{"status", "--redis", "redis://h:", "x"}, `dlock: invalid Redis URL: empty port after ":"`},
		{[]string{"status", "--redis", "redis://h:1?cluster=maybe", "x"}, "cluster=maybe; use cluster=true"},
		{[]string{"status", "--redis", "redis://h:1?addr=nohostport", "x"}, "redis: unable to parse addr param: nohostport"},
		{[]string{"status", "--redis", "redis://h:1?master_name=m&route_randomly=true", "x"}, "route_by_latency and route_randomly need"},
		{[]string{"status", "--redis", "redis://h:1?master_name=", "x"}, "empty master_name"},
		{[]string{"run", "--redis", "redis://a:1", "--redis", "redis://b:2", "x", "--", "true"}, "dlock: run: invalid option: a RedLock needs an odd number of servers, at least 3; got 2"},
		{[]string{"run", "--redis", "a:1", "--redis", "b:1", "--redis", "a:1", "x", "--", "true"}, "dlock: run: invalid option: RedLock server a:1 appears twice"},
		{[]string{"run", "--kind", "fair", "--redis", "a:1", "--redis", "b:1", "--redis", "c:1", "x", "--", "true"}, "several --redis make a RedLock, which is a mutex; --kind fair needs one Redis deployment"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := cliRunEnv(t, env, "", tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("stderr %q\nwant it to contain %q", r.stderr, tc.msg)
			}
			if n := strings.Count(r.stderr, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", n, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

// TestNoArgumentsPrintsUsage: dlock alone prints the usage on stderr and
// exits 2.
func TestNoArgumentsPrintsUsage(t *testing.T) {
	r := cliRun(t)
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, usage) || !strings.HasSuffix(r.stderr, "dlock: no command given\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestHelp checks that help for dlock, for each command and for each
// topic goes to stdout with exit 0, however it is asked for, that the text
// is the golden one in testdata/help (go test -update rewrites them), that
// every exit code is documented, and that command pages refer to the
// connection and exit status pages rather than repeat them.
func TestHelp(t *testing.T) {
	check := func(args []string, want string) {
		t.Helper()
		if r := cliRun(t, args...); r.code != 0 || r.stdout != want || r.stderr != "" {
			t.Errorf("dlock %v: exit %d, stdout %.40q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		check(args, usage)
	}
	golden(t, "help/dlock", usage)
	for _, cmd := range commands() {
		for _, args := range [][]string{{"help", cmd.name}, {cmd.name, "-h"}, {cmd.name, "--help"}} {
			check(args, cmd.usage)
		}
		golden(t, "help/"+cmd.name, cmd.usage)
		for _, block := range []string{"Exit status:", "redis://[user:password@]host:port[/db]"} {
			if strings.Contains(cmd.usage, block) {
				t.Errorf("dlock help %s repeats %q: it belongs to a help topic", cmd.name, block)
			}
		}
	}
	for name, text := range topics {
		check([]string{"help", name}, text)
		golden(t, "help/"+name, text)
	}
	for _, code := range []int{exitOK, exitFailure, exitUsage, exitNotObtained, exitUnreachable, exitAuth, exitLockLost, exitDeadlock, exitCannotExec, exitNotFound} {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^  %d +\S`, code)).MatchString(exitHelp) {
			t.Errorf("exit code %d is not documented in exitHelp", code)
		}
	}
}

// TestUsageDocumentsEveryFlag defines each command's flags through the
// command itself (with -h) and checks its usage text names them all, at
// the start of a line: "  -x", "  --name" or "  -x, --name".
func TestUsageDocumentsEveryFlag(t *testing.T) {
	for _, cmd := range commands() {
		var seen []string
		c := &cli{stdout: new(syncBuffer), stderr: new(syncBuffer), getenv: func(string) string { return "" }}
		// Parse with a FlagSet hook: run the command with -h and collect
		// the flags it defined from the flag set it parsed.
		defineHook = func(fs *flag.FlagSet) {
			fs.VisitAll(func(f *flag.Flag) { seen = append(seen, f.Name) })
		}
		_ = cmd.run(c, t.Context(), []string{"-h"})
		defineHook = nil
		if len(seen) == 0 && cmd.name != "version" {
			t.Errorf("%s: no flags seen", cmd.name)
		}
		for _, name := range seen {
			prefix := "--"
			if len(name) == 1 {
				prefix = "-"
			}
			re := regexp.MustCompile(`(?m)^  (-\w, )?` + regexp.QuoteMeta(prefix+name) + `[ ,]`)
			if !re.MatchString(cmd.usage) {
				t.Errorf("dlock %s: flag %s%s is not in the usage text", cmd.name, prefix, name)
			}
		}
	}
}
