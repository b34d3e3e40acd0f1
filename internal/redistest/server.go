package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a process may take to answer after start.
	readyTimeout = 10 * time.Second
	// startAttempts is how often a start is retried on a new port when the
	// chosen port was taken by someone else in the meantime.
	startAttempts = 5
	// logName is the file in the server's directory that gets its output.
	logName = "redis.log"
)

// Server is one redis-server (or redis-sentinel) child process listening on
// 127.0.0.1 with its own temporary directory. It runs in the foreground as a
// child of the test binary. All methods are safe for concurrent use.
type Server struct {
	bin  string   // path of the executable
	args []string // command line; fixed once the first start succeeded
	port int
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while not running
	exited chan struct{} // closed when cmd has exited
	closed bool
}

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
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// StartServers starts n independent redis-servers in parallel, as needed for
// RedLock. On error it closes the servers that did start.
func StartServers(n int, extraArgs ...string) ([]*Server, error) {
	return startParallel(n, func(int) (*Server, error) { return StartServer(extraArgs...) })
}

// NewServers is StartServers for tests: it fails tb on error and closes the
// servers when the test ends.
func NewServers(tb testing.TB, n int, extraArgs ...string) []*Server {
	tb.Helper()
	servers, err := StartServers(n, extraArgs...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = closeServers(servers) })
	return servers
}

// serverArgs is the redis-server command line: loopback only, no
// persistence, DEBUG allowed from loopback, and no delay for replica syncs.
func serverArgs(dir string, port int, extraArgs ...string) []string {
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--enable-debug-command", "local",
		"--repl-diskless-sync-delay", "0",
	}
	return append(args, extraArgs...)
}

// startProcess starts the executable name in a new temporary directory with
// the command line built by argv for a free port. If the port turns out to
// be taken, it retries with another one.
func startProcess(name string, argv func(dir string, port int) ([]string, error)) (*Server, error) {
	bin, err := lookPath(name)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{bin: bin, dir: dir}
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err == nil {
			if s.args, err = argv(dir, s.port); err == nil {
				err = s.start()
			}
		}
		if err == nil {
			return s, nil
		}
		if attempt == startAttempts || !errors.Is(err, errAddrInUse) {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

// startParallel runs start(0) ... start(n-1) concurrently and returns the
// servers in that order. On error it closes the servers that did start.
func startParallel(n int, start func(i int) (*Server, error)) ([]*Server, error) {
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = start(i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = closeServers(servers)
		return nil, err
	}
	return servers, nil
}

// closeServers closes every non-nil server and joins the errors.
func closeServers(servers []*Server) error {
	var errs []error
	for _, s := range servers {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Client returns a new go-redis client with default options for the server.
// The caller must close it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr()})
}

// Do runs one command on a fresh connection, without retries, and returns
// its reply, for example s.Do(ctx, "CONFIG", "GET", "maxmemory"). It gives up
// when ctx ends, or after go-redis's default timeouts (5s to connect, 3s to
// read) if that comes first.
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	c := s.adminClient()
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// adminClient returns a client for setup and checks: it never retries, so
// that every failure shows, and it respects context deadlines. The caller
// must close it.
func (s *Server) adminClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
}

// Kill sends SIGKILL and waits until the process is gone. The directory
// stays, so Restart can bring the server back. Kill does nothing if the
// process is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
}

// Pause freezes the process with SIGSTOP: connections stay open but nothing
// is answered until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a process frozen by Pause (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Restart stops the process (SIGKILL) and starts it again on the same port
// with the same command line, then waits until it answers. A plain server
// comes back empty; cluster nodes keep their nodes.conf and sentinels their
// rewritten configuration, so they rejoin their group.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("redistest: restart %s: server is closed", s.Addr())
	}
	s.stop()
	return s.start()
}

// Close kills the process, waits for it to exit and removes its directory.
// It is idempotent. Data is not saved: SIGKILL is used instead of SHUTDOWN
// because a graceful shutdown may wait for lagging replicas.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.stop()
	return os.RemoveAll(s.dir)
}

// start launches the process and waits until it answers. s.mu must be held
// (or s not yet shared). The log is truncated so that errors show only the
// output of this start.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, logName)
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(); err != nil {
		s.stop()
		return err
	}
	return nil
}

// waitReady polls the server until it answers INFO with the pid of our
// child, which also proves that no other process owns the port. It fails
// fast if the process exits.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	backoff := 2 * time.Millisecond
	for {
		pid, err := processID(s.Addr())
		if err == nil {
			if pid == s.cmd.Process.Pid {
				return nil
			}
			err = fmt.Errorf("port answered by another process (pid %d)", pid)
		}
		select {
		case <-s.exited:
			tail := logTail(filepath.Join(s.dir, logName))
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redistest: %s on port %d: %w", filepath.Base(s.bin), s.port, errAddrInUse)
			}
			return fmt.Errorf("redistest: %s on port %d exited during startup (%v); log:\n%s",
				filepath.Base(s.bin), s.port, s.cmd.ProcessState, tail)
		case <-time.After(backoff):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s on port %d not ready after %v (last error: %v); log:\n%s",
				filepath.Base(s.bin), s.port, readyTimeout, err, logTail(filepath.Join(s.dir, logName)))
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// stop kills the process, if any, and waits for it to exit. s.mu must be
// held. SIGKILL also ends a process stopped by Pause.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// signal sends sig to the process if it is running.
func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}
