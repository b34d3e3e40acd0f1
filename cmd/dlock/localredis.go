package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// localRedisReady bounds how long a throwaway redis-server may take to
// answer after it starts.
const localRedisReady = 10 * time.Second

// localRedis is a throwaway redis-server on 127.0.0.1, with no
// persistence, in its own temporary directory: the demo's Redis when no
// --redis is given.
type localRedis struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startLocalRedis starts redis-server on a free port and waits until it
// answers. extraArgs are appended to its command line. The caller must
// stop it.
func startLocalRedis(ctx context.Context, extraArgs ...string) (*localRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on PATH; install it (Debian: apt-get install redis-server) or give --redis")
	}
	var last error
	// A port found free may be taken before redis-server binds it; then
	// another port is tried.
	for range 5 {
		r, err := startLocalRedisOnce(ctx, bin, extraArgs)
		if err == nil {
			return r, nil
		}
		last = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, last
}

var errPortTaken = errors.New("port taken")

func startLocalRedisOnce(ctx context.Context, bin string, extraArgs []string) (*localRedis, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-redis-")
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	r := &localRedis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(r.done)
	}()
	if err := r.waitReady(ctx); err != nil {
		_ = r.stop()
		return nil, err
	}
	return r, nil
}

// waitReady polls the server with a raw PING until it answers (PONG, or
// NOAUTH from a server with a password).
func (r *localRedis) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(localRedisReady)
	for {
		if answers(r.addr) {
			return nil
		}
		select {
		case <-r.done:
			logText, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			if strings.Contains(string(logText), "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("redis-server exited at start: %s", lastLine(string(logText)))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer within %v", r.addr, localRedisReady)
		}
	}
}

// answers reports whether a Redis server answers PING at addr.
func answers(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// stop kills the server, waits for it and removes its directory.
func (r *localRedis) stop() error {
	_ = r.cmd.Process.Kill()
	<-r.done
	return os.RemoveAll(r.dir)
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

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
