package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	// redisURL is the URL of the redis-server TestMain starts.
	redisURL string
	// dlockBin is the dlock binary TestMain builds, for tests that need
	// real processes (signals, two holders, lock loss).
	dlockBin string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dlock-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dlockBin = filepath.Join(dir, "dlock")
	build := exec.Command("go", "build", "-o", dlockBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dlock:", err)
		return 1
	}

	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	redisURL = "redis://" + srv.Addr()
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping redis-server:", err)
	}
	// Every Client, watchdog and connection the tests made must be gone.
	if err := redistest.CheckGoroutines(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// result is what one dlock invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// cliRunEnv runs dlock in-process with DLOCK_REDIS_URL set to the test
// server, unless env says otherwise, and stdin as given.
func cliRunEnv(t testing.TB, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	// dlock run's COMMAND writes to the same buffers as dlock.
	var out, errOut syncBuffer
	c := &cli{
		stdin:  strings.NewReader(stdin),
		stdout: &out,
		stderr: &errOut,
		getenv: func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			if k == "DLOCK_REDIS_URL" {
				return redisURL
			}
			return ""
		},
	}
	code := c.main(t.Context(), args)
	return result{code, out.String(), errOut.String()}
}

// cliRun is cliRunEnv with the default environment and no stdin.
func cliRun(t testing.TB, args ...string) result {
	t.Helper()
	return cliRunEnv(t, nil, "", args...)
}

// dlockProcess starts the dlock binary with DLOCK_REDIS_URL set to the
// test server. Its output goes to the returned buffers.
func dlockProcess(t testing.TB, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(dlockBin, args...)
	cmd.Env = append(os.Environ(), "DLOCK_REDIS_URL="+redisURL)
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &out, &errOut
}

// exitCode waits for cmd and returns its exit code.
func exitCode(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not exit within 30s, nor within 10s of SIGKILL", cmd.Args)
		}
		t.Fatalf("%v did not exit within 30s", cmd.Args)
	}
	return cmd.ProcessState.ExitCode()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// newRedis returns a go-redis client for the test server.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// lockName returns a lock name unique to the test and deletes every key
// that mentions it when the test ends.
func lockName(t testing.TB) string {
	t.Helper()
	name := "cli:" + strings.ReplaceAll(t.Name(), "/", ":")
	rdb := newRedis(t)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "*"+name+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return name
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fileHas is a condition for eventually: the file at path contains want.
func fileHas(path, want string) func() error {
	return func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), want) {
			return fmt.Errorf("%s holds %q, want %q in it", path, b, want)
		}
		return nil
	}
}
