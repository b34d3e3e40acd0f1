package fencetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// orphanEnv makes the test binary, re-executed by
// TestPostgresDiesWithItsStarter, start a server and hang (startAndHang).
const orphanEnv = "FENCETEST_ORPHAN"

// startAndHang starts a server, prints its pid and dir, and waits to be
// killed (at most two minutes).
func startAndHang() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartPostgres(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %s\n", p.cmd.Process.Pid, p.dir)
	time.Sleep(2 * time.Minute)
	p.Close()
	return 1
}

// TestPostgresDiesWithItsStarter: a process killed before Close (SIGKILL,
// as go test -timeout or an OOM kill) takes its server with it, and the
// next StartPostgres removes the dir left behind.
func TestPostgresDiesWithItsStarter(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), orphanEnv+"=1")
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	var pid int
	var dir string
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		if _, err := fmt.Sscan(line, &pid, &dir); err != nil {
			t.Fatalf("the child's report %q: %v", line, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the child did not start its server within a minute")
	}
	if !alive(pid) {
		t.Fatalf("server %d not running before the kill", pid)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	eventually(t, 30*time.Second, "the server to die with the process that started it", func() bool { return !alive(pid) })
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); err != nil {
		t.Fatalf("the orphan's dir before the sweep: %v", err)
	}
	eventually(t, 30*time.Second, "the sweep to remove the orphan's dir", func() bool {
		sweep()
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})
}

// eventually polls cond every 50 ms until it holds, failing the test
// with what it waited for after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostgresCloseTwice: a second Close returns at once with the first
// one's result. The server starts under a locale that is not installed,
// which initdb must not inherit.
func TestPostgresCloseTwice(t *testing.T) {
	t.Setenv("LANG", "xx_YY.UTF-8")
	t.Setenv("LC_ALL", "xx_YY.UTF-8")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("second Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a second Close blocked for 20 s")
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("dir %s after Close: %v", p.dir, err)
	}
}
