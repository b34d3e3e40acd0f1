package redistest

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisserver"
)

// Server is one redis-server (or redis-sentinel) child process listening on
// 127.0.0.1 with its own temporary directory, started by internal/redisserver.
// It runs in the foreground as a child of the test binary. All methods are
// safe for concurrent use.
type Server = redisserver.Server

// StartServer starts a redis-server on a free port and waits until it
// answers. extraArgs are appended to the command line, for example
// "--maxmemory", "10mb". The caller must Close the server.
func StartServer(extraArgs ...string) (*Server, error) {
	return startProcess("redis-server", func(dir string, port int) ([]string, error) {
		return serverArgs(dir, port, extraArgs...), nil
	})
}

// NewServer is StartServer for tests: it fails tb on error and closes the
// server when the test ends.
func NewServer(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	s, err := StartServer(extraArgs...)
	return must(tb, s, err)
}

// must is the New* flavour of a Start* function's result: it fails tb on
// error and closes v when the test ends.
func must[T io.Closer](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = v.Close() })
	return v
}

// StartServers starts n independent redis-servers in parallel, as needed for
// RedLock. On error it closes the servers that did start.
func StartServers(n int, extraArgs ...string) ([]*Server, error) {
	return redisserver.StartMany(n, func(int) (*Server, error) { return StartServer(extraArgs...) })
}

// NewServers is StartServers for tests: it fails tb on error and closes the
// servers when the test ends.
func NewServers(tb testing.TB, n int, extraArgs ...string) []*Server {
	tb.Helper()
	servers, err := StartServers(n, extraArgs...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = redisserver.CloseAll(servers) })
	return servers
}

// serverArgs is the redis-server command line: loopback only, no
// persistence, DEBUG allowed from loopback, and no delay for replica syncs.
func serverArgs(dir string, port int, extraArgs ...string) []string {
	return redisserver.Args(dir, port, append([]string{
		"--enable-debug-command", "local",
		"--repl-diskless-sync-delay", "0",
	}, extraArgs...)...)
}

// startProcess starts the executable name on a free port with the command
// line built by argv, in a new temporary directory.
func startProcess(name string, argv func(dir string, port int) ([]string, error)) (*Server, error) {
	return redisserver.Start(context.Background(), redisserver.Config{Bin: name, TempPrefix: "redistest-", Args: argv})
}

// waitUntil calls check every 50ms until it returns nil and fails with the
// last error of check when timeout passes or ctx ends. Each call of check
// gets a context that ends at the deadline.
func waitUntil(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w; last check: %v", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
