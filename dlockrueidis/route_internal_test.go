package dlockrueidis

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

// newClusterClient starts a cluster and a rueidis client of it, with opt's
// other fields (client-side caching off).
func newClusterClient(t *testing.T, opt rueidis.ClientOption) (*redistest.Cluster, rueidis.Client) {
	t.Helper()
	cl := redistest.NewCluster(t)
	opt.InitAddress, opt.DisableCache = cl.Addrs(), true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return cl, rc
}

// TestRouterHonoursCallerAndCoalesces: while no node of the cluster
// answers (every node paused), the router's CLUSTER SLOTS ends with its
// caller's ctx, not routeTimeout later; concurrent reloads send one CLUSTER
// SLOTS between them; and lookups after the first load do not load again,
// even though the table could not be read.
func TestRouterHonoursCallerAndCoalesces(t *testing.T) {
	cl, rc := newClusterClient(t, rueidis.ClientOption{})
	r := newRouter(rc)
	for _, n := range cl.Nodes() {
		n.Pause()
		t.Cleanup(n.Resume)
	}

	// A lookup with a short deadline returns once it passed: well before
	// routeTimeout, which a load detached from its caller would wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got := make(chan string, 1)
	go func() { got <- r.node(ctx, "x") }()
	select {
	case addr := <-got:
		if addr != "" {
			t.Fatalf("node = %q with every node paused", addr)
		}
	case <-time.After(routeTimeout / 2):
		t.Fatalf("node still waiting %v after its ctx ended", routeTimeout/2)
	}
	for range 10 {
		r.node(context.Background(), "x")
	}
	if n := r.loads.Load(); n != 1 {
		t.Fatalf("%d CLUSTER SLOTS for 11 lookups, want 1 (the first)", n)
	}

	// Twenty reloads at once: each waits for the one in flight.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			r.refresh(ctx)
		}()
	}
	close(start)
	wg.Wait()
	if n := r.loads.Load() - 1; n > 2 {
		t.Fatalf("%d CLUSTER SLOTS for 20 concurrent reloads, want 1", n)
	}
}

// TestRouterLeavesADialThatIgnoresCancel: rueidis does not honour a
// cancelled ctx while it opens a connection (its handshake keeps only the
// deadline). With every node paused and the client's connections broken,
// a reload has to dial one; its caller still leaves as soon as its ctx is
// cancelled, not when the handshake gives up routeTimeout later. (Close
// of a hub whose nodes froze waits for such a reload.)
func TestRouterLeavesADialThatIgnoresCancel(t *testing.T) {
	var (
		mu    sync.Mutex
		conns []net.Conn
		dials atomic.Int64
	)
	cl, rc := newClusterClient(t, rueidis.ClientOption{
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			dials.Add(1)
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
			return c, err
		},
	})
	r := newRouter(rc)
	r.refresh(context.Background())
	for _, n := range cl.Nodes() {
		n.Pause()
		t.Cleanup(n.Resume)
	}
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()

	// Reload until one of the reloads dialed: a reload sent before the
	// client saw its connection broken fails at once instead.
	before := dials.Load()
	for try := 0; dials.Load() == before; try++ {
		if try == 50 {
			t.Fatal("50 reloads and none dialed a connection")
		}
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		r.refresh(ctx)
		took := time.Since(start)
		timer.Stop()
		cancel()
		if took > routeTimeout/2 {
			t.Fatalf("reload took %v: its caller's cancel was not kept", took.Round(time.Millisecond))
		}
	}
}

// TestHubCloseWhileSlotsUnanswered: a sharded hub whose nodes all stopped
// answering reopens its connection and reloads the slot table, which
// cannot be read; Close ends that reload rather than waiting for it.
func TestHubCloseWhileSlotsUnanswered(t *testing.T) {
	cl, rc := newClusterClient(t, rueidis.ClientOption{})
	r := newRouter(rc)
	hub := pubsub.NewSharded(func(_ context.Context, node string) pubsub.Conn {
		return newConn(nodeClient(rc, node))
	}, r.hubRouter())
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = hub.Close()
		}
	})
	w, err := hub.Subscribe(context.Background(), "close:{1}")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription not confirmed within 10s")
	}
	for _, n := range cl.Nodes() {
		n.Pause()
		t.Cleanup(n.Resume)
	}
	// The reader finds the connection silent, reopens it and reloads
	// the table: a second CLUSTER SLOTS, which no node answers.
	waitFor(t, 20*time.Second, "a reload after the connection went silent", func() bool {
		return r.loads.Load() >= 2
	})
	done := make(chan error, 1)
	go func() { done <- hub.Close() }()
	select {
	case <-done:
		closed = true
	case <-time.After(routeTimeout / 2):
		t.Fatalf("Close still waiting %v into a reload", routeTimeout/2)
	}
}
