package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// stderrLines splits stderr into lines and fails the test on any line not
// in dlock's own format ("dlock: ..."): a timestamped slog line or a raw
// go-redis line.
func stderrLines(t *testing.T, stderr string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "dlock: ") || strings.Contains(l, "WARN") || strings.Contains(l, "pool.go") {
			t.Errorf("stderr line %q is not in dlock's format; stderr:\n%s", l, stderr)
		}
	}
	return lines
}

// countLines counts the lines that contain s.
func countLines(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// TestRunLockLostReportedOnce: a lock deleted behind dlock run is reported
// in one line, in dlock's format, then the exit line; not also as the
// library's timestamped "WARN dlock: lock lost" record.
func TestRunLockLostReportedOnce(t *testing.T) {
	name := lockName(t)
	marks := filepath.Join(t.TempDir(), "marks")
	cmd, _, stderr := dlockProcess(t, "run", "--watchdog", "300ms", name, "sh", "-c", `echo started >> "$1"; exec sleep 600`, "sh", marks)
	eventually(t, 10*time.Second, fileHas(marks, "started"))
	if r := cliRun(t, "unlock", "--force", "--yes", name); r.code != 0 {
		t.Fatalf("unlock --force: exit %d, stderr %q", r.code, r.stderr)
	}
	if code := exitCode(t, cmd); code != exitLockLost {
		t.Errorf("exit %d, want %d", code, exitLockLost)
	}
	lines := stderrLines(t, stderr.String())
	want := []string{
		fmt.Sprintf(`dlock: lock lost: %q: the watchdog found it released or taken by another owner; stopping sh: SIGTERM now, SIGKILL in 5s`, name),
		fmt.Sprintf(`dlock: lock %q was lost while sh ran; sh was stopped (it exited with status 143)`, name),
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, strings.Join(want, "\n"))
	}
}

// TestRunRedisGoneWhileHeld: Redis goes away under dlock run. The failed
// renewals are each one line in dlock's format, the loss one line, and
// nothing comes after the loss but the exit line; go-redis's own dial
// failures show only with -v, as dlock debug lines.
func TestRunRedisGoneWhileHeld(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprintf("v=%v", verbose), func(t *testing.T) {
			name := lockName(t)
			proxy := redistest.NewTestProxy(t, strings.TrimPrefix(redisURL, "redis://"))
			marks := filepath.Join(t.TempDir(), "marks")
			args := []string{"run", "--redis", "redis://" + proxy.Addr(), "--watchdog", "900ms"}
			if verbose {
				args = append(args, "-v")
			}
			args = append(args, name, "sh", "-c", `echo started >> "$1"; exec sleep 600`, "sh", marks)
			cmd, _, stderr := dlockProcess(t, args...)
			eventually(t, 10*time.Second, fileHas(marks, "started"))
			if err := proxy.Close(); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, cmd); code != exitLockLost {
				t.Errorf("exit %d, want %d; stderr %q", code, exitLockLost, stderr)
			}
			lines := stderrLines(t, stderr.String())
			lost := -1
			for i, l := range lines {
				if strings.HasPrefix(l, "dlock: lock lost: ") {
					if lost >= 0 {
						t.Errorf("lock lost reported twice: lines %d and %d", lost, i)
					}
					lost = i
				}
			}
			if lost < 0 || lost != len(lines)-2 {
				t.Errorf("want the loss on the line before the exit line, and nothing after it; stderr:\n%s", stderr)
			}
			if n := countLines(lines, "dlock: lease renewal failed"); n == 0 {
				t.Errorf("no renewal failure reported before the loss; stderr:\n%s", stderr)
			}
			pool := countLines(lines, "dlock: debug: redis: connection pool: failed to dial")
			if !verbose && countLines(lines, "redis:") > 0 {
				t.Errorf("go-redis's lines shown without -v; stderr:\n%s", stderr)
			}
			if verbose && pool == 0 {
				t.Errorf("-v: want go-redis's dial failures as debug lines; stderr:\n%s", stderr)
			}
		})
	}
}

// TestRunRedisDownOneLine: against a Redis that is down, dlock run says
// so in one line, with no go-redis pool lines; -v adds them as dlock's
// debug lines.
func TestRunRedisDownOneLine(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d", port)
	for _, verbose := range []bool{false, true} {
		args := []string{"run", "--redis", url}
		if verbose {
			args = append(args, "-v")
		}
		args = append(args, "down-lock", "true")
		cmd := exec.Command(dlockBin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUnreachable {
			t.Fatalf("dlock %q: %v, want exit %d; stderr %q", args, err, exitUnreachable, stderr.String())
		}
		lines := stderrLines(t, stderr.String())
		last := fmt.Sprintf("dlock: cannot reach Redis at %s: dial tcp 127.0.0.1:%d: connect: connection refused", url, port)
		if lines[len(lines)-1] != last {
			t.Errorf("-v=%v: last line %q, want %q", verbose, lines[len(lines)-1], last)
		}
		pool := countLines(lines, "dlock: debug: redis: connection pool: failed to dial")
		switch {
		case !verbose && len(lines) != 1:
			t.Errorf("without -v: stderr %q, want the one line", stderr.String())
		case verbose && (pool == 0 || pool != len(lines)-1):
			t.Errorf("-v: stderr %q, want go-redis's dial failures as debug lines before it", stderr.String())
		}
	}
}

// TestCLILogFormat feeds the CLI's slog handler the library's records:
// one line each in dlock's format with passwords masked, debug ones only
// when verbose, "lock lost" never, and nothing once the CLI reported the
// loss.
func TestCLILogFormat(t *testing.T) {
	var buf syncBuffer
	l := newCLILog(&buf)
	l.addSecrets([]string{"s3cret"})
	log := l.slogger()
	log.Info("dlock: holder record not written", "error", errors.New("dlock: NOPERM"))
	log.Warn("dlock: lease renewal failed; retrying at the next tick", "error", errors.New("dlock: renewing 1 locks: dial s3cret"))
	log.Warn("dlock: giving back a hold failed; it expires with its lease", "lock", "a", "error", os.ErrClosed, "n", 2)
	log.Warn(lockLostMessage, "lock", "a", "owner", "x:1", "error", errors.New("dlock: lock lost: \"a\""))
	l.verbose()
	log.Debug("dlock: noted")
	redisLog{l}.Printf(t.Context(), "redis: connection pool: failed to dial after %d attempts", 5)
	l.reportedLoss()
	log.Warn("dlock: lease renewal failed; retrying at the next tick")
	log.Error("dlock: anything")
	want := `dlock: lease renewal failed; retrying at the next tick: renewing 1 locks: dial xxxxx
dlock: giving back a hold failed; it expires with its lease (lock "a"): file already closed [n=2]
dlock: debug: noted
dlock: debug: redis: connection pool: failed to dial after 5 attempts
`
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
	if log.Enabled(t.Context(), slog.LevelDebug) != true {
		t.Error("verbose: debug not enabled")
	}
}
