package verify

// The Redis side of a run: redis-server, its replicas and three sentinels,
// each in its own namespace of the run's Net, plus a resource server (the
// storage the lock protects, outside the lock's replication group) and a
// control node from which the harness itself talks to them all. Partitions
// never touch the control node or the resource.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ports of every server: each node has its own address.
const (
	redisPort    = "6379"
	sentinelPort = "26379"
	masterName   = "verify"
)

// Proc is one process in a node's namespace, restartable with the same
// command line.
type Proc struct {
	Node   *Node
	bin    string
	args   []string
	log    string
	env    []string  // nil: the harness's environment
	stdout io.Writer // nil: the log

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is the process's host:port.
func (p *Proc) Addr(port string) string { return net.JoinHostPort(p.Node.Addr, port) }

// Start starts the process (again).
func (p *Proc) Start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := p.Node.Command(p.bin, p.args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, f, f
	if p.stdout != nil {
		cmd.Stdout = p.stdout
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("dlock/verify: start %s in %s: %w", p.bin, p.Node.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// Signal sends sig to the running process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("dlock/verify: not started")
	}
	return syscall.Kill(cmd.Process.Pid, sig)
}

// stopped returns nil once every thread of the process is stopped (state
// T in /proc: a SIGSTOP has taken effect), an error otherwise.
func (p *Proc) stopped() error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("dlock/verify: not started")
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("dlock/verify: threads of %d: %v", cmd.Process.Pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return err
		}
		// "pid (comm) state ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return fmt.Errorf("dlock/verify: thread %s not stopped", t)
		}
	}
	return nil
}

// exited is closed when the process has exited.
func (p *Proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Kill sends SIGKILL (resuming a stopped process is not needed for that)
// and waits until the process is gone.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Topology is the Redis processes of one run.
type Topology struct {
	Net       *Net
	Ctl       *Node // the harness's own node, never partitioned
	Servers   []*Proc
	Sentinels []*Proc // empty for a single server and a cluster
	Resource  *Proc
	dir       string
	cluster   bool // Servers are a Redis Cluster (cluster.go)
}

// StartTopology starts, in namespaces of n, a master with replicas
// replicas, three sentinels when sentinel is set, and the resource
// server, and waits until they answer (and the replicas are in sync). On
// error it kills what it started; Close kills the rest.
func StartTopology(ctx context.Context, n *Net, dir string, replicas int, sentinel bool) (*Topology, error) {
	t := &Topology{Net: n, dir: dir}
	if err := t.start(ctx, replicas, sentinel); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// StartCluster starts, in namespaces of n, the Cluster topology (three
// masters with a replica each, cluster.go) and the resource server, and
// waits until the cluster is healthy. On error it kills what it started;
// Close kills the rest.
func StartCluster(ctx context.Context, n *Net, dir string) (*Topology, error) {
	t := &Topology{Net: n, dir: dir, cluster: true}
	err := t.startBase(ctx)
	if err == nil {
		err = t.startCluster(ctx)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// startBase starts what every topology has: the control node and the
// resource server.
func (t *Topology) startBase(ctx context.Context) error {
	var err error
	if t.Ctl, err = t.Net.AddNode(ctx, "ctl"); err != nil {
		return err
	}
	t.Resource, err = t.startRedis(ctx, "res", "")
	return err
}

func (t *Topology) start(ctx context.Context, replicas int, sentinel bool) error {
	if err := t.startBase(ctx); err != nil {
		return err
	}
	master, err := t.startRedis(ctx, "r0", "")
	if err != nil {
		return err
	}
	t.Servers = append(t.Servers, master)
	for i := 1; i <= replicas; i++ {
		r, err := t.startRedis(ctx, fmt.Sprintf("r%d", i), master.Node.Addr)
		if err != nil {
			return err
		}
		t.Servers = append(t.Servers, r)
	}
	if sentinel {
		for i := 1; i <= 3; i++ {
			s, err := t.startSentinel(ctx, fmt.Sprintf("s%d", i), master.Node.Addr)
			if err != nil {
				return err
			}
			t.Sentinels = append(t.Sentinels, s)
		}
	}
	return t.WaitHealthy(ctx, 60*time.Second)
}

// startRedis starts a redis-server without persistence on node name, a
// replica of master when master is set.
func (t *Topology) startRedis(ctx context.Context, name, master string) (*Proc, error) {
	nd, err := t.Net.AddNode(ctx, name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(t.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--bind", nd.Addr, "--port", redisPort, "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--dir", dir, "--repl-timeout", "5", "--repl-ping-replica-period", "1"}
	if master != "" {
		args = append(args, "--replicaof", master, redisPort)
	}
	if t.cluster && name != "res" {
		args = append(args, clusterArgs()...)
	}
	p := &Proc{Node: nd, bin: "redis-server", args: args, log: filepath.Join(dir, "redis.log")}
	if err := p.Start(); err != nil {
		return nil, err
	}
	if err := t.awaitPing(ctx, p.Addr(redisPort)); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// startSentinel starts a sentinel watching master: quorum 2 of 3, a master
// is down after a second without answers.
func (t *Topology) startSentinel(ctx context.Context, name, master string) (*Proc, error) {
	nd, err := t.Net.AddNode(ctx, name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(t.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	text := strings.Join([]string{
		"bind " + nd.Addr,
		"port " + sentinelPort,
		"protected-mode no",
		"dir " + dir,
		fmt.Sprintf("sentinel monitor %s %s %s 2", masterName, master, redisPort),
		"sentinel down-after-milliseconds " + masterName + " 1000",
		"sentinel failover-timeout " + masterName + " 4000",
		"sentinel parallel-syncs " + masterName + " 2",
	}, "\n") + "\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	p := &Proc{Node: nd, bin: "redis-sentinel", args: []string{conf}, log: filepath.Join(dir, "sentinel.log")}
	if err := p.Start(); err != nil {
		return nil, err
	}
	if err := t.awaitPing(ctx, p.Addr(sentinelPort)); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// Client returns a go-redis client that reaches addr from the control
// node. The caller closes it.
func (t *Topology) Client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Dialer: t.Ctl.DialContext, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
	})
}

// do runs one command on addr from the control node.
func (t *Topology) do(ctx context.Context, addr string, args ...any) (any, error) {
	c := t.Client(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

func (t *Topology) awaitPing(ctx context.Context, addr string) error {
	return poll(ctx, 15*time.Second, func() error {
		_, err := t.do(ctx, addr, "PING")
		return err
	})
}

// Master returns the server that is master now: the one the sentinels
// agree on, the master of the lock's slot in a cluster, or the only
// server.
func (t *Topology) Master(ctx context.Context) (*Proc, error) {
	if t.cluster {
		return t.clusterMaster(ctx)
	}
	if len(t.Sentinels) == 0 {
		return t.Servers[0], nil
	}
	var addr string
	for _, s := range t.Sentinels {
		v, err := t.do(ctx, s.Addr(sentinelPort), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
		if err != nil {
			return nil, err
		}
		r, ok := v.([]any)
		if !ok || len(r) != 2 {
			return nil, fmt.Errorf("dlock/verify: sentinel %s: master is %v", s.Node.Name, v)
		}
		a := fmt.Sprint(r[0])
		if addr != "" && a != addr {
			return nil, fmt.Errorf("dlock/verify: sentinels disagree on the master: %s, %s", addr, a)
		}
		addr = a
	}
	for _, p := range t.Servers {
		if p.Node.Addr == addr {
			return p, nil
		}
	}
	return nil, fmt.Errorf("dlock/verify: master %s is no server of ours", addr)
}

// Replicas returns the servers other than m (in a cluster: the other
// masters too).
func (t *Topology) Replicas(m *Proc) []*Proc {
	var out []*Proc
	for _, p := range t.Servers {
		if p != m {
			out = append(out, p)
		}
	}
	return out
}

// WaitHealthy waits until the sentinels agree on a master that reports the
// master role, and every other server is its replica with the link up and
// its offset caught up.
func (t *Topology) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	if t.cluster {
		return poll(ctx, timeout, func() error { return t.clusterHealthy(ctx) })
	}
	return poll(ctx, timeout, func() error {
		m, err := t.Master(ctx)
		if err != nil {
			return err
		}
		v, err := t.do(ctx, m.Addr(redisPort), "ROLE")
		if err != nil {
			return err
		}
		r, ok := v.([]any)
		if !ok || len(r) < 3 || r[0] != "master" {
			return fmt.Errorf("%s: ROLE %v", m.Node.Name, v)
		}
		offset, _ := r[1].(int64)
		for _, rp := range t.Replicas(m) {
			v, err := t.do(ctx, rp.Addr(redisPort), "ROLE")
			if err != nil {
				return err
			}
			rr, ok := v.([]any)
			if !ok || len(rr) < 5 || rr[0] != "slave" || rr[1] != m.Node.Addr || rr[3] != "connected" {
				return fmt.Errorf("%s: ROLE %v", rp.Node.Name, v)
			}
			if got, _ := rr[4].(int64); got < offset {
				return fmt.Errorf("%s: offset %d behind %d", rp.Node.Name, got, offset)
			}
		}
		return nil
	})
}

// Close kills every process; the namespaces go with the Net.
func (t *Topology) Close() {
	for _, p := range append(append(append([]*Proc{}, t.Sentinels...), t.Servers...), t.Resource) {
		if p != nil {
			p.Kill()
		}
	}
}

// poll calls f every 50 ms until it returns nil or timeout passes, and then
// returns f's last error.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dlock/verify: not within %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
