package main

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRunWaitSeconds: -w takes flock's bare seconds, whole or not, as well
// as Go durations.
func TestRunWaitSeconds(t *testing.T) {
	name := lockName(t)
	holder, _, _ := holdProcess(t, false, name)
	for _, tc := range []struct {
		wait string
		d    time.Duration
	}{
		{"0.5", 500 * time.Millisecond},
		{"1", time.Second},
		{"300ms", 300 * time.Millisecond},
	} {
		start := time.Now()
		r := cliRun(t, "run", "-w", tc.wait, name, "true")
		want := fmt.Sprintf("dlock: lock %q not obtained within --wait %v\n", name, tc.d)
		if r.code != exitNotObtained || r.stderr != want {
			t.Errorf("-w %s: exit %d, stderr %q; want %d, %q", tc.wait, r.code, r.stderr, exitNotObtained, want)
		}
		if waited := time.Since(start); waited < tc.d {
			t.Errorf("-w %s gave up after %v", tc.wait, waited)
		}
	}
	if r := cliRun(t, "run", "-w", "0", name, "true"); r.code != exitNotObtained || !strings.Contains(r.stderr, "(--wait 0)") {
		t.Errorf("-w 0: exit %d, stderr %q", r.code, r.stderr)
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, holder); code != 0 {
		t.Fatalf("holder: exit %d", code)
	}
	if r := cliRun(t, "run", "-w", "5", name, "true"); r.code != 0 {
		t.Errorf("-w 5 on a free lock: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRunSharedExclusive: -s takes a read lock and -x (--exclusive) the
// write lock of NAME, as flock's shared and exclusive locks: -s holders
// share, -x excludes them and is excluded, and a plain (mutex) run is
// excluded by both.
func TestRunSharedExclusive(t *testing.T) {
	name := lockName(t)
	try := func(args ...string) int {
		t.Helper()
		r := cliRun(t, append(append([]string{"run", "-n"}, args...), name, "true")...)
		if r.code != 0 && r.code != exitNotObtained {
			t.Fatalf("run -n %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		return r.code
	}
	reader, _, _ := holdProcess(t, false, "-s", name)
	if r := cliRun(t, "status", "--json", name); !strings.Contains(r.stdout, `"kind": "rwlock"`) || !strings.Contains(r.stdout, `"mode": "read"`) {
		t.Errorf("status while hold -s holds: %s", r.stdout)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-s"}, 0},
		{[]string{"--shared"}, 0},
		{[]string{"--kind", "read"}, 0},
		{[]string{"-x"}, exitNotObtained},
		{[]string{"--exclusive"}, exitNotObtained},
		{nil, exitNotObtained},
	} {
		if code := try(tc.args...); code != tc.code {
			t.Errorf("while a -s holder holds %s: run -n %v exits %d, want %d", name, tc.args, code, tc.code)
		}
	}
	_ = reader.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, reader); code != 0 {
		t.Fatalf("hold -s: exit %d", code)
	}

	writer, _, _ := holdProcess(t, false, "-x", name)
	if r := cliRun(t, "status", "--json", name); !strings.Contains(r.stdout, `"mode": "write"`) {
		t.Errorf("status while hold -x holds: %s", r.stdout)
	}
	for _, args := range [][]string{{"-s"}, {"-x"}, nil} {
		if code := try(args...); code != exitNotObtained {
			t.Errorf("while a -x holder holds %s: run -n %v exits %d, want %d", name, args, code, exitNotObtained)
		}
	}
	_ = writer.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, writer); code != 0 {
		t.Fatalf("hold -x: exit %d", code)
	}
}

// silentListener accepts TCP connections and never answers on them, like
// a Redis that hangs; it closes them when the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("accept loop did not end within 10s of closing the listener")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestRunNonblockBoundsConnectionCheck: against a Redis that accepts and
// never answers, -n gives up after 1s and -w 2s after 2s (with one server
// or the three of a RedLock), exiting 4 with the time they allowed; without
// them the check allows 5s.
func TestRunNonblockBoundsConnectionCheck(t *testing.T) {
	addr := silentListener(t)
	url := "redis://" + addr
	redlock := []string{"--redis", url, "--redis", silentListener(t), "--redis", silentListener(t)}
	for _, tc := range []struct {
		args  []string
		allow time.Duration
	}{
		{[]string{"-n", "--redis", url}, time.Second},
		{[]string{"-w", "0", "--redis", url}, time.Second},
		{[]string{"-w", "0.2", "--redis", url}, time.Second},
		{[]string{"-w", "2s", "--redis", url}, 2 * time.Second},
		{[]string{"-w", "2"}, 2 * time.Second},
		{append([]string{"-w", "2s"}, redlock...), 2 * time.Second},
		{append([]string{"-n"}, redlock...), time.Second},
	} {
		env := map[string]string{"DLOCK_REDIS_URL": url}
		start := time.Now()
		r := cliRunEnv(t, env, "", append(append([]string{"run"}, tc.args...), "hung", "true")...)
		took := time.Since(start)
		want := fmt.Sprintf("dlock: cannot reach Redis at %s: no answer within %v", url, tc.allow)
		if r.code != exitUnreachable || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("run %v: exit %d, stderr %q; want %d, %q", tc.args, r.code, r.stderr, exitUnreachable, want)
		}
		// A wide margin for a loaded machine, still short of the 5s that
		// the check allows without -n or -w.
		if took > tc.allow+2*time.Second {
			t.Errorf("run %v took %v, want about %v", tc.args, took.Round(time.Millisecond), tc.allow)
		}
	}
	start := time.Now()
	r := cliRun(t, "hold", "--redis", url, "hung")
	want := fmt.Sprintf("dlock: cannot reach Redis at %s: no answer within 5s", url)
	if r.code != exitUnreachable || !strings.HasPrefix(r.stderr, want) || time.Since(start) < 5*time.Second {
		t.Errorf("hold without -n or -w: exit %d after %v, stderr %q; want %d after 5s, %q", r.code, time.Since(start), r.stderr, exitUnreachable, want)
	}
}
