package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// localRedisReady bounds how long a throwaway redis-server may take to
// answer after it starts.
const localRedisReady = 10 * time.Second

// localRedis is a throwaway redis-server listening only on a unix socket
// in its own temporary directory, without persistence: the demo's Redis
// when no --redis is given. A socket needs no free port.
type localRedis struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

func (r *localRedis) socket() string { return filepath.Join(r.dir, "redis.sock") }
func (r *localRedis) log() string    { return filepath.Join(r.dir, "redis.log") }

// startLocalRedis starts redis-server and waits until it answers. The
// caller must stop it.
func startLocalRedis(ctx context.Context) (*localRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on PATH; install it (Debian: apt-get install redis-server) or give --redis")
	}
	dir, err := os.MkdirTemp("", "dlock-demo-")
	if err != nil {
		return nil, err
	}
	r := &localRedis{dir: dir, done: make(chan struct{})}
	log, err := os.Create(r.log())
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	r.cmd = exec.Command(bin, "--port", "0", "--unixsocket", r.socket(), "--save", "", "--appendonly", "no", "--dir", dir)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	r.cmd.SysProcAttr = childProcAttr() // dies with dlock (Linux)
	if err := r.cmd.Start(); err != nil {
		_ = log.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	go func() {
		_ = r.cmd.Wait()
		_ = log.Close()
		close(r.done)
	}()
	if err := r.waitReady(ctx); err != nil {
		_ = r.stop()
		return nil, err
	}
	return r, nil
}

// waitReady pings the server until it answers.
func (r *localRedis) waitReady(ctx context.Context) error {
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: r.socket(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(localRedisReady)
	for rdb.Ping(ctx).Err() != nil {
		select {
		case <-r.done:
			b, _ := os.ReadFile(r.log())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			return fmt.Errorf("redis-server exited at start: %s", lines[len(lines)-1])
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer within %v", localRedisReady)
		}
	}
	return nil
}

// stop kills the server, waits for it and removes its directory.
func (r *localRedis) stop() error {
	_ = r.cmd.Process.Kill()
	<-r.done
	return os.RemoveAll(r.dir)
}
