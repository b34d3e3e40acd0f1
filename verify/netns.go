package verify

// The network: one run's private IPv4 network made of Linux network
// namespaces. dlock's chaos tests can kill, pause and proxy, but not cut a
// network, and the failure that matters most for Redis locks is a client
// still talking to an old master that a Sentinel majority has replaced.
// Namespaces give every process its own network stack, so a partition is a
// route in the namespaces on either side, and nothing outside the run is
// touched: no interface, address or route is added to the host's own
// namespace.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace a harness creates:
// "dlockv-<pid>-<run>-<node>". Sweep removes the namespaces of processes
// that are gone, so a crashed run is cleaned up by the next.
const Prefix = "dlockv-"

// subnet is the private /24 of every run; each run has its own namespaces,
// so runs side by side do not see each other's addresses.
const subnet = "10.77.0."

var runSeq atomic.Int64

// Net is one run's network: a hub namespace holding a bridge, and one
// namespace per node, joined to the bridge by a veth pair, with address
// 10.77.0.N. Its methods are safe for concurrent use.
type Net struct {
	run string // "dlockv-<pid>-<seq>-"
	hub string

	mu     sync.Mutex
	nodes  []*Node
	routes map[[2]string]bool // blackholed (from namespace, to address)
	closed bool
}

// Node is one namespace of a Net, with its address on the bridge.
type Node struct {
	Name string // the role, e.g. "master", "c1"
	NS   string // the namespace's name
	Addr string // its IPv4 address
}

// NewNet creates a run's hub namespace and bridge, after sweeping the
// namespaces that earlier, dead harness processes left behind. Close
// removes everything it made.
func NewNet(ctx context.Context) (*Net, error) {
	if err := Sweep(ctx); err != nil {
		return nil, err
	}
	run := fmt.Sprintf("%s%d-%d-", Prefix, os.Getpid(), runSeq.Add(1))
	n := &Net{run: run, hub: run + "hub", routes: map[[2]string]bool{}}
	steps := [][]string{
		{"netns", "add", n.hub},
		{"-n", n.hub, "link", "set", "lo", "up"},
		{"-n", n.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", n.hub, "link", "set", "br0", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// AddNode creates a namespace for name joined to the bridge and returns it.
func (n *Net) AddNode(ctx context.Context, name string) (*Node, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("dlock/verify: network closed")
	}
	idx := len(n.nodes) + 2 // .1 is left free
	node := &Node{Name: name, NS: n.run + name, Addr: subnet + strconv.Itoa(idx)}
	n.nodes = append(n.nodes, node)
	n.mu.Unlock()
	veth := "v" + strconv.Itoa(idx)
	steps := [][]string{
		{"netns", "add", node.NS},
		{"-n", node.NS, "link", "set", "lo", "up"},
		// Both ends are made inside the run's namespaces: the host's
		// namespace never sees them.
		{"-n", n.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node.NS},
		{"-n", n.hub, "link", "set", veth, "master", "br0"},
		{"-n", n.hub, "link", "set", veth, "up"},
		{"-n", node.NS, "addr", "add", node.Addr + "/24", "dev", "eth0"},
		{"-n", node.NS, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return nil, err
		}
	}
	return node, nil
}

// Partition cuts every path between a node of a and a node of b, both
// ways: each side gets a blackhole route to the other's address, so
// packets vanish as in a real partition (TCP retransmits, then times out)
// and established connections are cut as well as new ones. Nodes in
// neither set keep reaching both.
func (n *Net) Partition(ctx context.Context, a, b []*Node) error {
	for _, x := range a {
		for _, y := range b {
			if err := n.blackhole(ctx, x, y); err != nil {
				return err
			}
			if err := n.blackhole(ctx, y, x); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *Net) blackhole(ctx context.Context, from, to *Node) error {
	k := [2]string{from.NS, to.Addr}
	n.mu.Lock()
	done := n.routes[k]
	n.routes[k] = true
	n.mu.Unlock()
	if done {
		return nil
	}
	return ip(ctx, "-n", from.NS, "route", "add", "blackhole", to.Addr+"/32")
}

// Heal removes every partition.
func (n *Net) Heal(ctx context.Context) error {
	n.mu.Lock()
	routes := n.routes
	n.routes = map[[2]string]bool{}
	n.mu.Unlock()
	var errs []error
	for k := range routes {
		errs = append(errs, ip(ctx, "-n", k[0], "route", "del", "blackhole", k[1]+"/32"))
	}
	return errors.Join(errs...)
}

// Hold holds back the TCP segments that from sends to the given ports of
// to's address: they wait, in order, in a queue on from's way out until
// Release, and none is lost, while from's other traffic goes on. It
// stands for one slow connection (a subscription whose messages come
// late), which a route cannot make. The queue is a traffic control class
// (tc's htb) of one byte a second, primed with a datagram that leaves it
// in debt for minutes, so that even the first segment waits. One hold per
// node at a time; the namespace's deletion removes it too.
func (n *Net) Hold(ctx context.Context, from, to *Node, ports ...int) error {
	steps := [][]string{
		{"qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"},
		{"class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"},
		{"class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", "8bit", "ceil", "8bit", "burst", "1", "cburst", "1"},
	}
	for _, p := range ports {
		steps = append(steps, []string{"filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
			"match", "ip", "dst", to.Addr + "/32", "match", "ip", "dport", strconv.Itoa(p), "0xffff", "flowid", "1:20"})
	}
	for _, s := range steps {
		if err := tc(ctx, from.NS, s...); err != nil {
			return errors.Join(err, n.Release(ctx, from))
		}
	}
	if len(ports) == 0 {
		return nil
	}
	// The first packet into a class goes whatever its rate: send one
	// that matches (to's kernel answers it with an ICMP error).
	c, err := from.DialContext(ctx, "udp", net.JoinHostPort(to.Addr, strconv.Itoa(ports[0])))
	if err == nil {
		_, err = c.Write(make([]byte, 1000))
		c.Close()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("dlock/verify: priming the hold: %w", err), n.Release(ctx, from))
	}
	return nil
}

// Release lets what Hold held on from go, at once and in order, and
// removes the hold. (Deleting the queue would drop what it holds.)
func (n *Net) Release(ctx context.Context, from *Node) error {
	err := tc(ctx, from.NS, "class", "change", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit", "ceil", "10gbit")
	if err == nil {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return errors.Join(err, tc(ctx, from.NS, "qdisc", "del", "dev", "eth0", "root"))
}

// Close deletes the run's namespaces; the veth pairs and the bridge go
// with them. It is safe to call more than once.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	nodes := n.nodes
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, nd := range nodes {
		errs = append(errs, delNS(ctx, nd.NS))
	}
	errs = append(errs, delNS(ctx, n.hub))
	return errors.Join(errs...)
}

// delNS deletes a namespace unless it is already gone.
func delNS(ctx context.Context, ns string) error {
	if _, err := os.Stat("/var/run/netns/" + ns); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ip(ctx, "netns", "del", ns)
}

// Namespaces lists the namespaces whose names start with prefix.
func Namespaces(ctx context.Context, prefix string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("dlock/verify: ip netns list: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Sweep deletes the namespaces of harness processes that no longer run
// (their pid is in the name), with the processes still inside them.
func Sweep(ctx context.Context) error {
	names, err := Namespaces(ctx, Prefix)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range names {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(ns, Prefix), "-", 2)[0])
		if err != nil || alive(pid) {
			continue
		}
		killIn(ctx, ns)
		errs = append(errs, delNS(ctx, ns))
	}
	return errors.Join(errs...)
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// killIn kills the processes left in namespace ns.
func killIn(ctx context.Context, ns string) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Command returns a command that runs in node's namespace. The process
// gets SIGKILL when the harness dies (Pdeathsig), so a crash leaves no
// process behind in a namespace that Sweep later deletes.
func (nd *Node) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", nd.NS, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// DialContext opens a TCP connection from node's namespace: the socket is
// made on an OS thread that has entered the namespace, and keeps it. The
// harness reaches its processes this way, from a node it never partitions.
func (nd *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := nd.inNamespace(func() (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		})
		res <- result{c, err}
	}()
	r := <-res
	return r.c, r.err
}

// inNamespace runs f on a locked OS thread switched into nd's namespace.
// If the thread cannot be switched back it stays locked, and the runtime
// ends it with the goroutine.
func (nd *Node) inNamespace(f func() (net.Conn, error)) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + nd.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("dlock/verify: namespace %s: %w", nd.NS, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("dlock/verify: setns %s: %w", nd.NS, err)
	}
	c, err := f()
	if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return c, err
}

// tc runs iproute2's tc in the namespace ns.
func tc(ctx context.Context, ns string, args ...string) error {
	out, err := exec.CommandContext(ctx, "tc", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("dlock/verify: tc -n %s %s: %w: %s", ns, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ip runs the ip command of iproute2.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("dlock/verify: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
