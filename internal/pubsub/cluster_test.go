package pubsub

// The sharded hub on a real cluster: an error reply to one SSUBSCRIBE
// moves that slot only (MOVED) or is reported (NOPERM), and moving channels
// to a node that does not answer holds up no other Subscribe.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// testCluster is the package's cluster, started on first use and closed
// by TestMain.
var testCluster struct {
	mu sync.Mutex
	cl *redistest.Cluster
}

func sharedCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	testCluster.mu.Lock()
	defer testCluster.mu.Unlock()
	if testCluster.cl == nil {
		cl, err := redistest.StartCluster()
		if err != nil {
			t.Fatal(err)
		}
		testCluster.cl = cl
	}
	return testCluster.cl
}

func closeCluster() error {
	testCluster.mu.Lock()
	defer testCluster.mu.Unlock()
	if testCluster.cl == nil {
		return nil
	}
	err := testCluster.cl.Close()
	testCluster.cl = nil
	return err
}

// rig is a sharded hub on the cluster with one plain go-redis client per
// node. Its routing table asks the cluster, except for the slots in wrong,
// which it names another node for until the next Refresh: a stale table.
// Each connection has a client of its own: one opened while its node's
// hold is set dials only once hold is closed (and signals dialing), as a
// dial to a node that does not answer would.
type rig struct {
	cl  *redistest.Cluster
	h   *Hub
	opt redis.Options // template of the node clients

	mu      sync.Mutex
	clients []*redis.Client
	wrong   map[int]string
	hold    map[string]chan struct{} // closed by the test that sets it
	dialing chan string

	reconnects atomic.Int32
	refused    chan error
}

func newRig(t *testing.T, opt redis.Options) *rig {
	r := &rig{
		cl: sharedCluster(t), opt: opt,
		wrong: map[int]string{}, hold: map[string]chan struct{}{},
		dialing: make(chan string, 16), refused: make(chan error, 16),
	}
	r.h = NewSharded(func(ctx context.Context, node string) Conn { return r.client(node).SSubscribe(ctx) }, Router{
		Slot: func(ch string) int { return int(layout.Slot(ch)) },
		Node: r.node,
		Refresh: func(context.Context) {
			r.mu.Lock()
			clear(r.wrong)
			r.mu.Unlock()
		},
	})
	r.h.OnReconnect = func(error) { r.reconnects.Add(1) }
	r.h.OnError = func(err error) { r.refused <- err }
	t.Cleanup(func() {
		_ = r.h.Close()
		for _, c := range r.clients {
			_ = c.Close()
		}
	})
	return r
}

func (r *rig) node(_ context.Context, ch string) string {
	r.mu.Lock()
	n := r.wrong[int(layout.Slot(ch))]
	r.mu.Unlock()
	if n != "" {
		return n
	}
	if m := r.cl.MasterFor(ch); m != nil {
		return m.Addr()
	}
	return ""
}

// client returns a new client of node for one connection.
func (r *rig) client(node string) *redis.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	hold := r.hold[node]
	opt := r.opt
	opt.Addr = node
	opt.DialTimeout = time.Minute // the hold, not go-redis, ends a held dial
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if hold != nil {
			r.dialing <- addr
			<-hold
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	c := redis.NewClient(&opt)
	r.clients = append(r.clients, c)
	return c
}

// subscribe registers a waiter on ch and waits for its confirmation.
func (r *rig) subscribe(t *testing.T, ch string) *Waiter {
	t.Helper()
	w, err := r.h.Subscribe(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(false) })
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("subscription of %s not confirmed within 10s", ch)
	}
	return w
}

// subscribeAsync subscribes to ch on a goroutine and reports, once Redis
// confirmed it (within 10 s) and the waiter left, nil or what failed.
func (r *rig) subscribeAsync(ch string) <-chan error {
	done := make(chan error, 1)
	go func() {
		w, err := r.h.Subscribe(context.Background(), ch)
		if err == nil {
			select {
			case <-w.Ready():
			case <-time.After(10 * time.Second):
				err = errors.New("not confirmed within 10s")
			}
			w.Close(false)
		}
		done <- err
	}()
	return done
}

// channelsOn returns n channels in different slots served by m.
func channelsOn(cl *redistest.Cluster, m *redistest.Server, n int, prefix string) []string {
	var chans []string
	for i := 0; len(chans) < n && i < 1000; i++ {
		ch := prefix + "{" + strconv.Itoa(i) + "}"
		if cl.MasterFor(ch) == m {
			chans = append(chans, ch)
		}
	}
	return chans
}

// twoMasters returns two masters of the cluster.
func twoMasters(t *testing.T, cl *redistest.Cluster) (a, b *redistest.Server) {
	t.Helper()
	ms := cl.Masters(context.Background())
	if len(ms) < 2 {
		t.Fatalf("%d masters", len(ms))
	}
	return ms[0], ms[1]
}

// notWoken fails t if any of ws holds a wake-up.
func notWoken(t *testing.T, what string, ws ...*Waiter) {
	t.Helper()
	for i, w := range ws {
		if len(w.wake) != 0 {
			t.Fatalf("%s: waiter %d woken", what, i)
		}
	}
}

// TestClusterMovedMovesOneSlot: an SSUBSCRIBE sent by a stale routing
// table to a master that does not serve its slot is answered MOVED. The
// hub reloads the table and moves that slot's channel to its master; the
// channels of other slots on the same connection stay subscribed on it,
// and their waiters are not woken.
func TestClusterMovedMovesOneSlot(t *testing.T) {
	r := newRig(t, redis.Options{})
	a, b := twoMasters(t, r.cl)
	xs := channelsOn(r.cl, a, 2, "moved:x")
	y := channelsOn(r.cl, b, 1, "moved:y")[0]
	w1, w2 := r.subscribe(t, xs[0]), r.subscribe(t, xs[1])
	sa := r.h.shard(a.Addr())
	r.mu.Lock()
	r.wrong[int(layout.Slot(y))] = a.Addr()
	r.mu.Unlock()
	wy := r.subscribe(t, y) // refused by a, then subscribed on b
	if got := r.h.shard(a.Addr()); got != sa {
		t.Fatal("the connection to the first master was reopened for another slot's MOVED")
	}
	if r.h.shard(b.Addr()) == nil {
		t.Fatal("no connection to the slot's master")
	}
	notWoken(t, "after another slot's MOVED", w1, w2)
	// The channels that stayed still hear their messages.
	for _, x := range append(xs, y) {
		if _, err := r.cl.MasterFor(x).Do(context.Background(), "SPUBLISH", x, "1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := woken(10*time.Second, w1, w2, wy); count(got) != 3 {
		t.Fatalf("SPUBLISH woke %v, want all three", got)
	}
}

// TestClusterRefusalReported: an SSUBSCRIBE refused for good (NOPERM: the
// ACL does not allow the channel) is reported through OnError once, and
// the hub does not reopen the connection to try again; the waiter is left
// to its own timeout.
func TestClusterRefusalReported(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	for _, n := range cl.Nodes() {
		if _, err := n.Do(ctx, "ACL", "SETUSER", "hubtest", "on", ">pw", "~*", "resetchannels", "&allowed:*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range cl.Nodes() {
			_, _ = n.Do(ctx, "ACL", "DELUSER", "hubtest")
		}
	})
	r := newRig(t, redis.Options{Username: "hubtest", Password: "pw"})
	a, _ := twoMasters(t, r.cl)
	ok := r.subscribe(t, channelsOn(cl, a, 1, "allowed:")[0])
	denied := channelsOn(cl, a, 1, "denied:")[0]
	w, err := r.h.Subscribe(ctx, denied)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(false)
	select {
	case err := <-r.refused:
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			t.Fatalf("OnError heard %v, want the refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal was not reported within 10s")
	}
	// The connection is still the one that was refused, and it works.
	if _, err := a.Do(ctx, "SPUBLISH", channelsOn(cl, a, 1, "allowed:")[0], "1"); err != nil {
		t.Fatal(err)
	}
	if got := woken(10*time.Second, ok); !got[0] {
		t.Fatal("the allowed channel's waiter missed its message")
	}
	if n := r.reconnects.Load(); n != 0 {
		t.Fatalf("%d reconnects after a refusal", n)
	}
	select {
	case <-w.Ready():
		t.Fatal("a refused subscription is ready")
	default:
	}
	if len(r.refused) != 0 {
		t.Fatalf("%d more refusals reported", len(r.refused))
	}
}

// heldRehome subscribes x (on master a), then breaks a's pub/sub
// connections with every dial to a held, and returns once the hub is
// dialing a again to move x there, with x's waiter and the function that
// lets the dial go on (also called at cleanup).
func (r *rig) heldRehome(t *testing.T, a *redistest.Server, x string) (*Waiter, func()) {
	t.Helper()
	wx := r.subscribe(t, x)
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the waiters' cleanups, which need the hub
	r.mu.Lock()
	r.hold[a.Addr()] = hold
	r.mu.Unlock()
	if _, err := a.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.dialing:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub did not dial the master again within 10s")
	}
	return wx, release
}

// TestClusterRehomeDoesNotBlockHub: while the hub moves a master's
// channels to a new connection whose dial does not complete (the node
// does not answer), a Subscribe on another master goes ahead: the dial is
// not made under the hub's mutex.
func TestClusterRehomeDoesNotBlockHub(t *testing.T) {
	r := newRig(t, redis.Options{})
	a, b := twoMasters(t, r.cl)
	x := channelsOn(r.cl, a, 1, "rehome:x")[0]
	z := channelsOn(r.cl, b, 1, "rehome:z")[0]
	wx, release := r.heldRehome(t, a, x)
	done := make(chan error, 1)
	go func() {
		w, err := r.h.Subscribe(context.Background(), z)
		if err == nil {
			w.Close(false)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe on another master blocked while a dial was pending")
	}
	r.mu.Lock()
	delete(r.hold, a.Addr())
	r.mu.Unlock()
	release() // the held dial goes on
	if got := woken(10*time.Second, wx); !got[0] {
		t.Fatal("the moved channel's waiter was not woken by its resubscription")
	}
	if _, err := a.Do(context.Background(), "SPUBLISH", x, "1"); err != nil {
		t.Fatal(err)
	}
	if got := woken(10*time.Second, wx); !got[0] {
		t.Fatalf("%s: the resubscribed channel missed its message", x)
	}
}

// pin routes ch to m without asking the cluster (until the next Refresh),
// so that routing does not wait for a node that does not answer.
func (r *rig) pin(ch string, m *redistest.Server) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wrong[int(layout.Slot(ch))] = m.Addr()
}

// frozenDial has r's hub subscribe to a channel on master a, which is
// paused, with a ctx of timeout d, and returns once the new connection is being
// dialed: it will be accepted but never greeted while a is paused. The
// Subscribe's outcome arrives on the returned channel. a resumes before
// the rig's cleanup, or when the test calls the returned function.
func frozenDial(t *testing.T, r *rig, a *redistest.Server, x string, d time.Duration) (<-chan error, func()) {
	t.Helper()
	r.pin(x, a)
	signal := make(chan struct{})
	close(signal) // the dial signals r.dialing and goes on
	r.mu.Lock()
	r.hold[a.Addr()] = signal
	r.mu.Unlock()
	// The cluster is shared: should a stalled run keep a paused past the
	// cluster's node timeout (2 s), the tests that follow get a healthy
	// cluster again, failed over.
	t.Cleanup(func() {
		if err := r.cl.WaitHealthy(context.Background()); err != nil {
			t.Error(err)
		}
	})
	a.Pause()
	resume := sync.OnceFunc(a.Resume)
	t.Cleanup(resume)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		w, err := r.h.Subscribe(ctx, x)
		if err == nil {
			select {
			case <-w.Ready():
			case <-ctx.Done():
				err = ctx.Err()
			}
			w.Close(false)
		}
		done <- err
	}()
	select {
	case <-r.dialing:
	case <-time.After(10 * time.Second):
		resume()
		t.Fatal("the hub did not dial the paused master within 10s")
	}
	return done, resume
}

// TestClusterSubscribeDoesNotBlockHub: while a Subscribe dials a new
// connection to a master that does not answer (paused: TCP is accepted,
// the handshake never answered), a Subscribe on another master's channel
// is confirmed at once: the dial and the SSUBSCRIBE are not made under
// the hub's mutex. The first one completes once the master resumes.
func TestClusterSubscribeDoesNotBlockHub(t *testing.T) {
	r := newRig(t, redis.Options{ReadTimeout: 10 * time.Second})
	a, b := twoMasters(t, r.cl)
	x := channelsOn(r.cl, a, 1, "frozen:x")[0]
	z := channelsOn(r.cl, b, 1, "frozen:z")[0]
	r.pin(z, b)
	frozen, resume := frozenDial(t, r, a, x, time.Minute)

	other := r.subscribeAsync(z)
	// Within a second: the cluster fails a paused master over after 2s.
	select {
	case err := <-other:
		resume()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		resume()
		<-other
		t.Fatal("Subscribe on another master waited for a dial to a paused one")
	}
	select {
	case err := <-frozen:
		if err != nil {
			t.Fatalf("the Subscribe on the resumed master: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Subscribe on the resumed master was not confirmed within 10s")
	}
}

// TestClusterCloseDoesNotWaitForAFrozenDial: Close returns at once while
// a Subscribe dials a master that does not answer. go-redis keeps only a
// ctx's deadline while it dials, and closing its PubSub waits for the
// dial: Close leaves it to go-redis's timeout.
func TestClusterCloseDoesNotWaitForAFrozenDial(t *testing.T) {
	r := newRig(t, redis.Options{ReadTimeout: 10 * time.Second})
	a, _ := twoMasters(t, r.cl)
	x := channelsOn(r.cl, a, 1, "frozen:close")[0]
	frozen, resume := frozenDial(t, r, a, x, time.Minute)

	closed := make(chan struct{})
	go func() {
		_ = r.h.Close()
		close(closed)
	}()
	// Within a second: the cluster fails a paused master over after 2s.
	select {
	case <-closed:
		resume()
	case <-time.After(time.Second):
		resume()
		<-closed
		t.Fatal("Close waited for a dial to a paused master")
	}
	select {
	case err := <-frozen:
		if err == nil {
			t.Fatal("a Subscribe that Close overtook succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the pending Subscribe did not return within 15s of Close")
	}
}

// TestClusterRefusalLeavesNoCount: a refused SSUBSCRIBE (NOPERM) is never
// confirmed, so it must not stay counted as in flight: once the ACL allows
// the channel, its next subscription would take its own confirmation for
// the refused one's and never be ready.
func TestClusterRefusalLeavesNoCount(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	acl := func(rules ...any) {
		t.Helper()
		for _, n := range cl.Nodes() {
			if _, err := n.Do(ctx, append([]any{"ACL", "SETUSER", "hubcount"}, rules...)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	acl("on", ">pw", "~*", "resetchannels", "&allowed:*", "+@all")
	t.Cleanup(func() {
		for _, n := range cl.Nodes() {
			_, _ = n.Do(ctx, "ACL", "DELUSER", "hubcount")
		}
	})
	r := newRig(t, redis.Options{Username: "hubcount", Password: "pw"})
	a, _ := twoMasters(t, r.cl)
	r.subscribe(t, channelsOn(cl, a, 1, "allowed:")[0]) // keeps the connection
	denied := channelsOn(cl, a, 1, "denied:")[0]
	w, err := r.h.Subscribe(ctx, denied)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal was not reported within 10s")
	}
	w.Close(false)

	acl("&denied:*")
	r.subscribe(t, denied) // fails unless confirmed within 10s
}

// TestClusterLastLeaveDoesNotBlockHub: the last waiter of a connection
// that rehome is dialing to a node that does not answer leaves at once,
// and the hub goes on: the connection is closed off the hub's mutex, as
// go-redis's PubSub.Close waits for the dial.
func TestClusterLastLeaveDoesNotBlockHub(t *testing.T) {
	r := newRig(t, redis.Options{})
	a, b := twoMasters(t, r.cl)
	x := channelsOn(r.cl, a, 1, "leave:x")[0]
	z := channelsOn(r.cl, b, 1, "leave:z")[0]
	wx, release := r.heldRehome(t, a, x)
	left := make(chan struct{})
	go func() {
		wx.Close(false) // the last channel of the connection being dialed
		close(left)
	}()
	select {
	case <-left:
	case <-time.After(time.Second):
		release()
		<-left
		t.Fatal("the last waiter's Close waited for a dial")
	}
	r.subscribe(t, z) // the hub goes on
}

// TestClusterFailedSendRetriedByJoiner: a Subscribe of a channel whose
// first Subscribe is still sending waits for it; when that send fails (its
// ctx ended while its dial was held), the second one sends again with its
// own ctx instead of waiting for ever, and is confirmed.
func TestClusterFailedSendRetriedByJoiner(t *testing.T) {
	r := newRig(t, redis.Options{})
	a, _ := twoMasters(t, r.cl)
	x := channelsOn(r.cl, a, 1, "joiner:x")[0]
	r.pin(x, a)
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	r.mu.Lock()
	r.hold[a.Addr()] = hold
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		w, err := r.h.Subscribe(ctx, x)
		if err == nil {
			w.Close(false)
		}
		first <- err
	}()
	select {
	case <-r.dialing:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub did not dial the master within 10s")
	}
	second := r.subscribeAsync(x)
	<-ctx.Done()
	release() // the first dial goes on with its ctx ended, and fails
	if err := <-first; err == nil {
		t.Fatal("the first Subscribe succeeded after its ctx ended")
	}
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("the second Subscribe: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the second Subscribe waited for the failed one's send")
	}
}
