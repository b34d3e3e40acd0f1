// Package redisserver starts throwaway Redis processes: redis-server (or
// redis-sentinel) as a child process in its own temporary directory, on a
// free 127.0.0.1 port or on a unix socket, without persistence. It is the
// one starter behind internal/redistest (tests), cmd/dlock's demo and
// bench. On Linux a child gets SIGKILL when its parent dies (Pdeathsig), so
// a crashed program leaves no server behind; on Unix it runs in its own
// process group, so a Ctrl-C meant for the parent does not stop it before
// the parent's cleanup ran.
package redisserver

import (
	"cmp"
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
	// socketName is the unix socket in the server's directory (Config.Unix).
	socketName = "redis.sock"
)

// ErrNotFound reports that the executable is not on PATH.
var ErrNotFound = errors.New("not found on PATH")

// Config says which process to start and how.
type Config struct {
	// Bin is the executable, looked up on PATH: "redis-server" when empty.
	Bin string
	// Unix has the server listen only on a unix socket in its directory
	// instead of on a TCP port; Args then gets port 0.
	Unix bool
	// TempPrefix starts the name of the server's temporary directory;
	// "redisserver-" when empty.
	TempPrefix string
	// Args returns the command line for a process in dir listening on port;
	// nil means Args(dir, port).
	Args func(dir string, port int) ([]string, error)
}

// Server is one redis-server (or redis-sentinel) child process with its own
// temporary directory, listening on 127.0.0.1 or on a unix socket. All
// methods are safe for concurrent use.
type Server struct {
	bin     string   // path of the executable
	args    []string // command line; fixed once the first start succeeded
	network string   // "tcp" or "unix"
	addr    string   // host:port or the socket's path
	port    int      // 0 on a unix socket
	dir     string

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while not running
	exited chan struct{} // closed when cmd has exited
	closed bool
}

// Args is redis-server's command line for a throwaway server in dir:
// loopback only on port (on dir's unix socket alone when port is 0), no
// persistence, then extra.
func Args(dir string, port int, extra ...string) []string {
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port)}
	if port == 0 {
		args = []string{"--port", "0", "--unixsocket", filepath.Join(dir, socketName)}
	}
	args = append(args, "--save", "", "--appendonly", "no", "--dir", dir)
	return append(args, extra...)
}

// Start starts the process cfg describes in a new temporary directory and
// waits until it answers, or ctx ends. A port taken between choosing and
// binding is retried with another. The caller must Close the server.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin, err := LookPath(cmp.Or(cfg.Bin, "redis-server"))
	if err != nil {
		return nil, err
	}
	argv := cfg.Args
	if argv == nil {
		argv = func(dir string, port int) ([]string, error) { return Args(dir, port), nil }
	}
	dir, err := os.MkdirTemp("", cmp.Or(cfg.TempPrefix, "redisserver-"))
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	s := &Server{bin: bin, dir: dir, network: "tcp"}
	if cfg.Unix {
		s.network, s.addr = "unix", filepath.Join(dir, socketName)
	}
	for attempt := 1; ; attempt++ {
		if cfg.Unix || s.setPort() == nil {
			if s.args, err = argv(dir, s.port); err == nil {
				err = s.start(ctx)
			}
		}
		if err == nil {
			return s, nil
		}
		if cfg.Unix || attempt == startAttempts || !errors.Is(err, errAddrInUse) {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

// setPort picks a free port for the next start attempt.
func (s *Server) setPort() error {
	port, err := FreePort()
	if err == nil {
		s.port, s.addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return err
}

// StartMany runs start(0) ... start(n-1) concurrently and returns the
// servers in that order. On error it closes the servers that did start.
func StartMany(n int, start func(i int) (*Server, error)) ([]*Server, error) {
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = CloseAll(servers)
		return nil, err
	}
	return servers, nil
}

// CloseAll closes every non-nil server and joins the errors.
func CloseAll(servers []*Server) error {
	var errs []error
	for _, s := range servers {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// Network returns "tcp", or "unix" for a server on a unix socket.
func (s *Server) Network() string { return s.network }

// Addr returns the server's address: "127.0.0.1:port", or the path of its
// unix socket.
func (s *Server) Addr() string { return s.addr }

// Port returns the server's TCP port, 0 on a unix socket.
func (s *Server) Port() int { return s.port }

// Client returns a new go-redis client with default options for the server.
// The caller must close it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Network: s.network, Addr: s.addr})
}

// Do runs one command on a fresh connection, without retries, and returns
// its reply, for example s.Do(ctx, "CONFIG", "GET", "maxmemory"). It gives up
// when ctx ends, or after go-redis's default timeouts (5s to connect, 3s to
// read) if that comes first.
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	c := s.AdminClient()
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// AdminClient returns a client for setup and checks: it never retries, so
// that every failure shows, and it respects context deadlines. The caller
// must close it.
func (s *Server) AdminClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Network:               s.network,
		Addr:                  s.addr,
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
// is answered until Resume. It does nothing outside Unix.
func (s *Server) Pause() { s.signal(sigStop) }

// Resume continues a process frozen by Pause (SIGCONT).
func (s *Server) Resume() { s.signal(sigCont) }

// Restart stops the process (SIGKILL) and starts it again on the same
// address with the same command line, then waits until it answers. A plain
// server comes back empty; cluster nodes keep their nodes.conf and
// sentinels their rewritten configuration, so they rejoin their group.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("redisserver: restart %s: server is closed", s.addr)
	}
	s.stop()
	return s.start(context.Background())
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
func (s *Server) start(ctx context.Context) error {
	logFile, err := os.Create(filepath.Join(s.dir, logName))
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("redisserver: start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(ctx); err != nil {
		s.stop()
		return err
	}
	return nil
}

// waitReady polls the server until it answers INFO with the pid of our
// child, which also proves that no other process owns the port. It fails
// fast if the process exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	backoff := 2 * time.Millisecond
	name := filepath.Base(s.bin)
	for {
		pid, err := processID(s.network, s.addr)
		if err == nil {
			if pid == s.cmd.Process.Pid {
				return nil
			}
			err = fmt.Errorf("address answered by another process (pid %d)", pid)
		}
		select {
		case <-s.exited:
			tail := logTail(filepath.Join(s.dir, logName))
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redisserver: %s on %s: %w", name, s.addr, errAddrInUse)
			}
			return fmt.Errorf("redisserver: %s on %s exited during startup (%v); log:\n%s",
				name, s.addr, s.cmd.ProcessState, tail)
		case <-ctx.Done():
			return fmt.Errorf("redisserver: %s on %s: %w", name, s.addr, ctx.Err())
		case <-time.After(backoff):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisserver: %s on %s not ready after %v (last error: %v); log:\n%s",
				name, s.addr, readyTimeout, err, logTail(filepath.Join(s.dir, logName)))
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
	if s.cmd != nil && sig != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}
