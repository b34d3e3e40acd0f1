package verify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needRoot skips a test that needs network namespaces where they cannot
// be made.
func needRoot(t *testing.T) {
	t.Helper()
	if err := exec.Command("ip", "netns", "list").Run(); err != nil {
		t.Skipf("ip netns unavailable: %v", err)
	}
	if out, err := exec.Command("id", "-u").Output(); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Skip("network namespaces need root")
	}
}

// hostLinks lists the interfaces of the host's own namespace.
func hostLinks(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	slices.Sort(names)
	return names
}

// ourNamespaces lists this process's namespaces: other harnesses (make
// verify) may be making and removing theirs meanwhile.
func ourNamespaces(t *testing.T) []string {
	t.Helper()
	names, err := Namespaces(context.Background(), fmt.Sprintf("%s%d-", Prefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestNetLeavesNothing: a run's namespaces exist while it runs and are all
// gone after Close, after a run that failed half-way, and after a run
// whose process died (Sweep); the host's links never change.
func TestNetLeavesNothing(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	beforeNS, beforeLinks := ourNamespaces(t), hostLinks(t)

	// A run that fails half-way: the deferred Close still removes it.
	failed := func() (err error) {
		n, err := NewNet(ctx)
		if err != nil {
			return err
		}
		defer n.Close()
		if _, err := n.AddNode(ctx, "a"); err != nil {
			return err
		}
		if got := len(ourNamespaces(t)) - len(beforeNS); got != 2 {
			t.Errorf("namespaces while running: %d new, want 2 (hub and a)", got)
		}
		if _, err := n.AddNode(ctx, "a"); err == nil { // same name: ip fails
			return errors.New("a second node a was made")
		}
		return errors.New("the run failed")
	}()
	if failed == nil || failed.Error() != "the run failed" {
		t.Fatalf("the failing run: %v", failed)
	}
	if got := ourNamespaces(t); !slices.Equal(got, beforeNS) {
		t.Errorf("namespaces after a failed run: %v, before: %v", got, beforeNS)
	}

	// A dead harness's namespaces (pid 2^22+1 does not exist) are swept.
	stale := Prefix + "4194305-1-hub"
	if err := ip(ctx, "netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { delNS(ctx, stale) })
	n, err := NewNet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all, err := Namespaces(ctx, Prefix); err != nil || slices.Contains(all, stale) {
		t.Errorf("NewNet did not sweep %s", stale)
	}
	if _, err := n.AddNode(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ourNamespaces(t); !slices.Equal(got, beforeNS) {
		t.Errorf("namespaces after Close: %v, before: %v", got, beforeNS)
	}
	if got := hostLinks(t); !slices.Equal(got, beforeLinks) {
		t.Errorf("host links after: %v, before: %v", got, beforeLinks)
	}
}

// TestPartitionStopsTraffic: while the master is partitioned from a
// client, a PING from the client's namespace gets no answer, on a new
// connection and on one opened before; after Heal it works again. The
// control node, in neither set, reaches the master throughout.
func TestPartitionStopsTraffic(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	n, err := NewNet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	topo, err := StartTopology(ctx, n, t.TempDir(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	client, err := n.AddNode(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	master := topo.Servers[0]
	addr := master.Addr(redisPort)
	ping := func(conn *respConn) error {
		ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if conn == nil {
			c, err := dialResp(ctx, client, addr)
			if err != nil {
				return err
			}
			defer c.Close()
			conn = c
		}
		return conn.ping(ctx)
	}
	old, err := dialResp(ctx, client, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := ping(nil); err != nil {
		t.Fatalf("PING before the partition: %v", err)
	}
	if err := ping(old); err != nil {
		t.Fatalf("PING on the open connection before the partition: %v", err)
	}
	if err := n.Partition(ctx, []*Node{master.Node}, []*Node{client}); err != nil {
		t.Fatal(err)
	}
	if err := ping(nil); err == nil {
		t.Error("a new connection from the client reached the partitioned master")
	}
	if err := ping(old); err == nil {
		t.Error("the open connection reached the partitioned master")
	}
	if _, err := topo.do(ctx, addr, "PING"); err != nil {
		t.Errorf("the control node lost the master: %v", err)
	}
	if err := n.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ping(nil); err != nil {
		t.Errorf("PING after healing: %v", err)
	}
}

// TestHoldDelaysOneConnection: a message the master pushes on a held
// subscription connection, the first segment it sends there since the
// hold, waits until Release and then arrives, while another connection
// from the same client goes on.
func TestHoldDelaysOneConnection(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	n, err := NewNet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	topo, err := StartTopology(ctx, n, t.TempDir(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	client, err := n.AddNode(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	master := topo.Servers[0]
	var conns [2]*respConn
	for i := range conns {
		if conns[i], err = dialResp(ctx, client, master.Addr(redisPort)); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		conns[i].SetDeadline(time.Now().Add(5 * time.Second))
	}
	sub, free := conns[0], conns[1]
	// readUntil reads sub's lines until one is want.
	readUntil := func(want string, d time.Duration) error {
		sub.SetReadDeadline(time.Now().Add(d))
		for {
			line, err := sub.r.ReadString('\n')
			if err != nil {
				return err
			}
			if strings.TrimSpace(line) == want {
				return nil
			}
		}
	}
	if _, err := sub.Write([]byte("SUBSCRIBE ch\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := readUntil(":1", time.Second); err != nil {
		t.Fatalf("SUBSCRIBE: %v", err)
	}
	if err := n.Hold(ctx, master.Node, client, sub.LocalAddr().(*net.TCPAddr).Port); err != nil {
		t.Fatal(err)
	}
	if _, err := free.Write([]byte("PUBLISH ch hello\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := free.r.ReadString('\n'); err != nil || strings.TrimSpace(line) != ":1" {
		t.Errorf("PUBLISH on the other connection, during the hold: %q, %v", line, err)
	}
	if err := readUntil("hello", 300*time.Millisecond); err == nil {
		t.Error("the message came through the hold")
	}
	if err := n.Release(ctx, master.Node); err != nil {
		t.Fatal(err)
	}
	if err := readUntil("hello", time.Second); err != nil {
		t.Errorf("the message after Release: %v", err)
	}
}

// TestFailedRunLeavesNothing: a whole run that fails (its workers reject
// an unknown workload) returns its error and leaves no namespace, host
// link or process behind.
func TestFailedRunLeavesNothing(t *testing.T) {
	needRoot(t)
	beforeNS, beforeLinks := ourNamespaces(t), hostLinks(t)
	dir := t.TempDir()
	sc := Scenario{Topo: TopoSentinel, Fault: FaultNone, Workload: "no-such-workload", Duration: time.Second}
	if _, err := Run(context.Background(), sc, dir); err == nil {
		t.Fatal("a run with an unknown workload succeeded")
	}
	if got := ourNamespaces(t); !slices.Equal(got, beforeNS) {
		t.Errorf("namespaces after a failed run: %v, before: %v", got, beforeNS)
	}
	if got := hostLinks(t); !slices.Equal(got, beforeLinks) {
		t.Errorf("host links after: %v, before: %v", got, beforeLinks)
	}
	if left := processesMentioning(t, dir); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

// processesMentioning lists the processes whose command line, working
// directory or environment mentions s (redis-server rewrites its command
// line, but works in its directory).
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil || d.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		env, _ := os.ReadFile("/proc/" + d.Name() + "/environ")
		cwd, _ := os.Readlink("/proc/" + d.Name() + "/cwd")
		if strings.Contains(string(cmd), s) || strings.Contains(string(env), s) || strings.HasPrefix(cwd, s) {
			out = append(out, d.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}
