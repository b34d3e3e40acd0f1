package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// redLockNodes starts n independent servers and returns them with one
// dlock Client per server.
func redLockNodes(t testing.TB, n int, opts ...Option) ([]*redistest.Server, []*Client) {
	t.Helper()
	servers := redistest.NewServers(t, n)
	return servers, redClients(t, servers, opts...)
}

// redClients returns a new set of dlock Clients, one per server, each on
// its own go-redis client with default options, closed with t.
func redClients(t testing.TB, servers []*redistest.Server, opts ...Option) []*Client {
	t.Helper()
	clients := make([]*Client, len(servers))
	for i, s := range servers {
		rdb := s.Client()
		t.Cleanup(func() { _ = rdb.Close() })
		clients[i] = newClient(t, rdb, opts...)
	}
	return clients
}

// newRedisAt returns a go-redis client for addr, closed with t.
func newRedisAt(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func mustRedLock(t testing.TB, clients []*Client, name string, opts ...LockOption) *RedLock {
	t.Helper()
	l, err := NewRedLock(clients, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// keyOn reports whether server s has key.
func keyOn(t testing.TB, s *redistest.Server, key string) bool {
	t.Helper()
	n, err := s.Do(context.Background(), "EXISTS", key)
	if err != nil {
		t.Fatal(err)
	}
	return n.(int64) == 1
}

// expireOn makes key expire on s at once (PEXPIRE 1, standing in for a
// clock jump on that server), again if a renewal got in within the
// millisecond, until the key is gone.
func expireOn(t testing.TB, s *redistest.Server, key string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if _, err := s.Do(context.Background(), "PEXPIRE", key, 1); err != nil {
			return err
		}
		if keyOn(t, s, key) {
			return fmt.Errorf("%s still has %s", s.Addr(), key)
		}
		return nil
	})
}

// eventuallyFree waits until no server in servers has key. Requests to a
// node slower than the node timeout finish after the call that sent them
// returned, so the check waits; a key left for its lease would fail it.
func eventuallyFree(t testing.TB, key string, servers ...*redistest.Server) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		for _, s := range servers {
			if keyOn(t, s, key) {
				return fmt.Errorf("server %s still holds %s", s.Addr(), key)
			}
		}
		return nil
	})
}

// failedAddrs returns the addresses a *QuorumError in err names, sorted.
func failedAddrs(t testing.TB, err error) []string {
	t.Helper()
	var qe *QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("error %v has no *QuorumError", err)
	}
	var addrs []string
	for _, f := range qe.Failed {
		addrs = append(addrs, f.Addr)
	}
	slices.Sort(addrs)
	return addrs
}

func addrsOf(servers ...*redistest.Server) []string {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	slices.Sort(addrs)
	return addrs
}

func TestRedLockQuorumWithNodesDown(t *testing.T) {
	ctx := context.Background()
	servers, clients := redLockNodes(t, 5)
	name := "test:" + t.Name()
	l := mustRedLock(t, clients, name, WithLease(10*time.Second))

	servers[3].Kill()
	servers[4].Kill()
	lockCtx, err := l.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 2 of 5 servers down: %v", err)
	}
	for _, s := range servers[:3] {
		if !keyOn(t, s, name) {
			t.Fatalf("server %s does not hold the lock", s.Addr())
		}
	}
	if err := l.Unlock(lockCtx); err != nil {
		t.Fatalf("Unlock with 2 of 5 servers down: %v", err)
	}

	// No quorum, and no node says the lock is taken: an error, not a
	// busy lock (as a Mutex reports a server that is down).
	servers[2].Kill()
	_, err = l.TryLock(ctx)
	if err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with 3 of 5 servers down: %v, want an error that is not ErrNotObtained", err)
	}
	down := addrsOf(servers[2:]...)
	if got := failedAddrs(t, err); !slices.Equal(got, down) {
		t.Fatalf("failed nodes %v, want the servers that are down %v", got, down)
	}
	for _, a := range down {
		if !strings.Contains(err.Error(), a) {
			t.Fatalf("error %q does not name down node %s", err, a)
		}
	}
	// The failed round was undone on the nodes that had accepted.
	eventuallyFree(t, name, servers[:2]...)

	// Lock does not wait for the servers to come back: it returns the
	// error at once, before ctx ends.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = l.Lock(wctx)
	if err == nil || errors.Is(err, ErrNotObtained) || wctx.Err() != nil {
		t.Fatalf("Lock with 3 of 5 servers down: %v (ctx %v), want an error that is not ErrNotObtained, before ctx ends", err, wctx.Err())
	}
	var ne *NodeError
	if !errors.As(err, &ne) || !slices.Contains(down, ne.Addr) {
		t.Fatalf("Lock with 3 of 5 servers down: %v, want a *NodeError naming a down server", err)
	}
	if got := failedAddrs(t, err); !slices.Equal(got, down) {
		t.Fatalf("failed nodes %v, want %v", got, down)
	}

	// One node that says the lock is taken makes it busy, even among errors.
	other := mustMutex(t, clients[0], name, WithLease(time.Minute))
	held := mustLock(t, ctx, other)
	_, err = l.TryLock(ctx)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with 3 of 5 servers down and 1 held by another owner: %v, want ErrNotObtained", err)
	}
	var ne2 *NodeError
	if !errors.As(err, &ne2) || !slices.Contains(failedAddrs(t, err), servers[0].Addr()) {
		t.Fatalf("failed nodes %v, want the held one %s among them", failedAddrs(t, err), servers[0].Addr())
	}
	if err := other.Unlock(held); err != nil {
		t.Fatal(err)
	}
}

func TestRedLockUndoesMinorityGrants(t *testing.T) {
	ctx := context.Background()
	servers, clients := redLockNodes(t, 5)
	name := "test:" + t.Name()
	// Another owner holds the lock on three nodes, as plain Mutexes.
	for _, c := range clients[:3] {
		mustLock(t, ctx, mustMutex(t, c, name, WithLease(time.Minute)))
	}
	l := mustRedLock(t, clients, name)
	_, err := l.TryLock(ctx)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock: %v, want ErrNotObtained", err)
	}
	if got, want := failedAddrs(t, err), addrsOf(servers[:3]...); !slices.Equal(got, want) {
		t.Fatalf("failed nodes %v, want the held ones %v", got, want)
	}
	eventuallyFree(t, name, servers[3:]...)
}

func TestRedLockKeyLossOnMinority(t *testing.T) {
	ctx := context.Background()
	const watchdog = 600 * time.Millisecond
	servers, clients := redLockNodes(t, 5, WithWatchdogTimeout(watchdog))
	name := "test:" + t.Name()
	l := mustRedLock(t, clients, name)
	lockCtx := mustLock(t, ctx, l)
	// Lock returns once a quorum granted it; the other grants may still be
	// on their way, and one landing after expireOn would bring a node back.
	eventually(t, 5*time.Second, func() error {
		for _, s := range servers {
			if !keyOn(t, s, name) {
				return fmt.Errorf("%s does not hold the lock yet", s.Addr())
			}
		}
		return nil
	})

	// Two nodes lose the key, as after a clock jump or a restart.
	for _, s := range servers[:2] {
		expireOn(t, s, name)
	}
	// Well past the original lease, the lock is still held: the watchdog
	// keeps extending it on the quorum that has it.
	select {
	case <-lockCtx.Done():
		t.Fatalf("lock lost while a quorum held it: %v", context.Cause(lockCtx))
	case <-time.After(3 * watchdog):
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL = %v, %v; want the lease renewed on a quorum", ttl, err)
	}

	// A third node loses it: the quorum is gone, and the holder is told.
	expireOn(t, servers[2], name)
	select {
	case <-lockCtx.Done():
	case <-time.After(10 * watchdog):
		t.Fatal("the lock context was not cancelled after the quorum was lost")
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := l.Unlock(lockCtx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after losing the quorum: %v, want ErrNotHeld", err)
	}
}

func TestRedLockFixedLeaseEndsAtValidity(t *testing.T) {
	ctx := context.Background()
	_, clients := redLockNodes(t, 3)
	const lease = 400 * time.Millisecond
	l := mustRedLock(t, clients, "test:"+t.Name(), WithLease(lease))
	start := time.Now()
	lockCtx := mustLock(t, ctx, l)
	select {
	case <-lockCtx.Done():
	case <-time.After(lease + 5*time.Second):
		t.Fatal("the lock context outlived its lease")
	}
	elapsed := time.Since(start)
	if valid := lease - drift(lease); elapsed < valid {
		t.Fatalf("lock context ended after %v, before the validity %v", elapsed, valid)
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
}

func TestRedLockMutualExclusion(t *testing.T) {
	servers := redistest.NewServers(t, 5)
	name := "test:" + t.Name()
	const sets, perSet, rounds = 3, 2, 8
	var counter, inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sets*perSet)
	for range sets {
		// Each set is another process's view: its own Clients and RedLock.
		l := mustRedLock(t, redClients(t, servers), name, WithLease(10*time.Second))
		for range perSet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					lockCtx, err := l.Lock(ctx)
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := counter.Load() // a non-atomic increment: lost updates show overlaps
					time.Sleep(time.Millisecond)
					counter.Store(v + 1)
					inside.Add(-1)
					if err := l.Unlock(lockCtx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, 2*time.Minute, "the lockers")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlaps.Load() != 0 || counter.Load() != sets*perSet*rounds {
		t.Fatalf("%d overlapping holds, counter %d; want 0 and %d", overlaps.Load(), counter.Load(), sets*perSet*rounds)
	}
}

func TestRedLockFrozenNode(t *testing.T) {
	ctx := context.Background()
	const nodeTimeout = 200 * time.Millisecond
	// Default go-redis options: ReadTimeout 3 s, and the ctx deadline does
	// not reach the socket. The node timeout must hold anyway.
	servers, clients := redLockNodes(t, 5)
	name := "test:" + t.Name()
	l := mustRedLock(t, clients, name, WithLease(10*time.Second), WithNodeTimeout(nodeTimeout))
	for _, s := range servers[:2] {
		t.Cleanup(s.Resume)
	}

	servers[0].Pause()
	start := time.Now()
	lockCtx, err := l.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with one node frozen: %v", err)
	}
	if d := time.Since(start); d > nodeTimeout+time.Second {
		t.Fatalf("one frozen node stalled the acquisition for %v; node timeout %v", d, nodeTimeout)
	}
	if err := l.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}

	// No quorum without the frozen nodes: the attempt (and its undo) is
	// bounded by the node timeout, not by go-redis's 3 s read timeout.
	servers[1].Pause()
	servers[2].Kill()
	start = time.Now()
	_, err = l.TryLock(ctx)
	d := time.Since(start)
	if errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock with 2 frozen and 1 dead: %v, want a node DeadlineExceeded and not ErrNotObtained", err)
	}
	if got, want := failedAddrs(t, err), addrsOf(servers[:3]...); !slices.Equal(got, want) {
		t.Fatalf("failed nodes %v, want %v", got, want)
	}
	if d > 2*nodeTimeout+1500*time.Millisecond {
		t.Fatalf("frozen nodes stalled a failed attempt for %v; node timeout %v", d, nodeTimeout)
	}
}

func TestRedLockReentrant(t *testing.T) {
	ctx := context.Background()
	servers, clients := redLockNodes(t, 3)
	name := "test:" + t.Name()
	l := mustRedLock(t, clients, name)
	outer := mustLock(t, ctx, l)
	inner := mustLock(t, outer, l)
	if n, err := l.HoldCount(inner); err != nil || n != 2 {
		t.Fatalf("HoldCount = %d, %v; want 2", n, err)
	}
	// Another owner is excluded meanwhile.
	if _, err := l.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock by another owner: %v, want ErrNotObtained", err)
	}
	if err := l.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	if inner.Err() == nil || outer.Err() != nil {
		t.Fatal("Unlock(inner) must end inner only")
	}
	if locked, err := l.IsLocked(ctx); err != nil || !locked {
		t.Fatalf("IsLocked after one of two unlocks = %v, %v", locked, err)
	}
	if err := l.Unlock(outer); err != nil {
		t.Fatal(err)
	}
	eventuallyFree(t, name, servers...)
	if err := l.Unlock(outer); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
}

// TestRedLockFencingAcrossQuorums builds the case where per-node counters
// disagree: one node's counter is far ahead, the next owner's quorum leaves
// that node out. Its token must still be larger.
func TestRedLockFencingAcrossQuorums(t *testing.T) {
	ctx := context.Background()
	servers, clients := redLockNodes(t, 5)
	name := "test:" + t.Name()
	counter := prefixName(tokenPrefix, name)
	if _, err := servers[0].Do(ctx, "SET", counter, 100); err != nil {
		t.Fatal(err)
	}
	l := mustRedLock(t, clients, name, WithFencing())

	// Quorum {0, 1, 2}: the token comes from node 0's counter.
	servers[3].Kill()
	servers[4].Kill()
	a := mustLock(t, ctx, l)
	ta, ok := Token(a)
	if !ok || ta <= 100 {
		t.Fatalf("first token = %d, %v; want > 100", ta, ok)
	}
	if err := l.Unlock(a); err != nil {
		t.Fatal(err)
	}

	// Quorum within {1, 2, 3, 4}: without node 0.
	servers[0].Kill()
	for _, s := range servers[3:] {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	b := mustLock(t, ctx, l)
	tb, _ := Token(b)
	if tb <= ta {
		t.Fatalf("token went from %d to %d across owners", ta, tb)
	}
	if err := l.Unlock(b); err != nil {
		t.Fatal(err)
	}
}

func TestNewRedLockValidates(t *testing.T) {
	_, clients := redLockNodes(t, 3)
	other := newClient(t, newRedisAt(t, clients[0].rdb.(*redis.Client).Options().Addr))
	tests := []struct {
		name    string
		clients []*Client
		opts    []LockOption
	}{
		{"two servers", clients[:2], nil},
		{"four servers", append(slices.Clone(clients), clients[0]), nil},
		{"nil client", []*Client{clients[0], nil, clients[2]}, nil},
		{"same server twice", []*Client{clients[0], clients[1], other}, nil},
		{"same Client twice", []*Client{clients[0], clients[1], clients[0]}, nil},
		{"same go-redis client twice", []*Client{clients[0], clients[1], newClient(t, clients[0].rdb)}, nil},
		{"node timeout too long", clients, []LockOption{WithLease(time.Second), WithNodeTimeout(200 * time.Millisecond)}},
		{"negative node timeout", clients, []LockOption{WithNodeTimeout(-1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewRedLock(tt.clients, "x", tt.opts...); !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("got %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := NewRedLock(clients, ""); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("empty name: %v, want ErrInvalidName", err)
	}
	l := mustRedLock(t, clients, "x", WithLease(time.Second))
	if l.k.timeout != 100*time.Millisecond {
		t.Fatalf("default node timeout for a 1s lease = %v, want 100ms", l.k.timeout)
	}
	l = mustRedLock(t, clients, "x", WithLease(200*time.Millisecond))
	if l.k.timeout != 20*time.Millisecond {
		t.Fatalf("default node timeout for a 200ms lease = %v, want a tenth of it", l.k.timeout)
	}
}

// failoverRedis returns a Sentinel failover client for master over
// sentinels that are never dialed, closed with t.
func failoverRedis(t testing.TB, master string, sentinels ...string) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: sentinels})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestNewRedLockSentinelClients: go-redis gives every failover client the
// address "FailoverClient", so three Sentinel groups must not be taken for
// one server; the same go-redis client twice still is. Nothing listens at
// the sentinel addresses: NewRedLock must not dial.
func TestNewRedLockSentinelClients(t *testing.T) {
	var clients []*Client
	for i := range 3 {
		rdb := failoverRedis(t, fmt.Sprintf("group%d", i), fmt.Sprintf("127.0.0.1:%d", i+1))
		clients = append(clients, newClient(t, rdb))
	}
	l, err := NewRedLock(clients, "x")
	if err != nil {
		t.Fatalf("three distinct failover clients: %v", err)
	}
	names := map[string]bool{}
	for _, nd := range l.k.nodes {
		if !strings.HasPrefix(nd.addr, "FailoverClient ") || names[nd.addr] {
			t.Fatalf("node names %v: want each failover node named apart", l.k.nodes)
		}
		names[nd.addr] = true
	}

	// Two Clients on one failover client: one server.
	twice := []*Client{clients[0], clients[1], newClient(t, clients[0].rdb)}
	if _, err := NewRedLock(twice, "x"); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("two Clients on one failover client: %v, want ErrInvalidOption", err)
	}
	// A failover client next to plain clients: only the plain ones'
	// addresses are compared.
	mixed := []*Client{clients[0], newClient(t, newRedisAt(t, "127.0.0.1:1")), newClient(t, newRedisAt(t, "127.0.0.1:2"))}
	if _, err := NewRedLock(mixed, "x"); err != nil {
		t.Fatalf("a failover client and two plain ones: %v", err)
	}
}

// dialHook is a go-redis hook that runs before every new connection of
// the client it is added to.
type dialHook func()

func (h dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h()
		return next(ctx, network, addr)
	}
}

func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// lossyRedis returns a go-redis client for the server at addr, through a
// new proxy, that calls between at its first dial after the proxy lost a
// reply: go-redis re-sends the command on a new connection, so between runs
// after the command's first run and before the second. script is loaded
// first, so that the lost reply is the script's and not a NOSCRIPT.
func lossyRedis(t testing.TB, addr string, script *redis.Script, between func()) (*redis.Client, *redistest.Proxy) {
	t.Helper()
	if err := script.Load(context.Background(), newRedisAt(t, addr)).Err(); err != nil {
		t.Fatal(err)
	}
	proxy := redistest.NewTestProxy(t, addr)
	// One connection: a re-sent command must dial a new one (and so run
	// between), not take another idle one from the pool.
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 3, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	// Connect now: the replies to go-redis's handshake (HELLO) must not
	// be the ones the proxy loses.
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	rdb.AddHook(dialHook(func() {
		if proxy.Drops() > 0 {
			once.Do(between)
		}
	}))
	return rdb, proxy
}

// TestForceUnlockLostReplyKeepsNextOwner loses the reply to a ForceUnlock;
// before go-redis sends it again, another owner takes the lock. The re-sent
// command must answer as the first run did (the request latch) and leave
// the new owner's lock alone.
func TestForceUnlockLostReplyKeepsNextOwner(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name, WithLease(time.Minute))
	mustLock(t, ctx, m)
	next := make(chan context.Context, 1)
	rdb, proxy := lossyRedis(t, redisAddr, scripts.ForceRelease, func() {
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Errorf("the next owner, between the two runs: %v", err)
		}
		next <- l
	})
	forcer := mustMutex(t, newClient(t, rdb), name)

	proxy.DropNextReply()
	deleted, err := forcer.ForceUnlock(ctx)
	if err != nil || !deleted {
		t.Fatalf("ForceUnlock after a lost reply = %v, %v; want true, nil (the first run's answer)", deleted, err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("proxy dropped %d replies, want 1", proxy.Drops())
	}
	var l context.Context
	select {
	case l = <-next:
	default:
		t.Fatal("go-redis re-sent the command without a new connection: no owner took the lock in between")
	}
	if l == nil {
		t.FailNow()
	}
	if n, err := m.HoldCount(l); err != nil || n != 1 {
		t.Fatalf("the next owner's HoldCount = %d, %v; want 1: the re-sent ForceUnlock deleted its lock", n, err)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestRedLockForceUnlockLostReply is the same on one node of a RedLock: the
// force release sent to each node carries its own request latch.
func TestRedLockForceUnlockLostReply(t *testing.T) {
	ctx := context.Background()
	servers := redistest.NewServers(t, 3)
	name := "test:" + t.Name()
	plain := redClients(t, servers)
	next := make(chan context.Context, 1)
	// Another owner, as a plain Mutex on node 0, takes the lock between
	// the two runs of node 0's force release.
	other := mustMutex(t, plain[0], name, WithLease(time.Minute))
	rdb, proxy := lossyRedis(t, servers[0].Addr(), scripts.ForceRelease, func() {
		l, err := other.TryLock(ctx)
		if err != nil {
			t.Errorf("the next owner, between the two runs: %v", err)
		}
		next <- l
	})
	clients := append([]*Client{newClient(t, rdb)}, plain[1:]...)
	settleRecord(t, clients[0]) // the reply lost must not be the holder record's
	l := mustRedLock(t, clients, name, WithLease(time.Minute), WithNodeTimeout(5*time.Second))
	mustLock(t, ctx, l)
	// Lock returns at a quorum: node 0's reply may still be on its way,
	// and the proxy must lose the force release's reply, not that one.
	eventually(t, 5*time.Second, func() error {
		l.k.sent.mu.Lock()
		defer l.k.sent.mu.Unlock()
		if n := len(l.k.sent.m); n > 0 {
			return fmt.Errorf("%d acquire requests still on their way", n)
		}
		return nil
	})

	proxy.DropNextReply()
	deleted, err := l.ForceUnlock(ctx)
	if err != nil || !deleted {
		t.Fatalf("ForceUnlock after a lost reply = %v, %v; want true, nil", deleted, err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("proxy dropped %d replies, want 1", proxy.Drops())
	}
	var held context.Context
	select {
	case held = <-next:
	default:
		t.Fatal("go-redis re-sent the command without a new connection: no owner took the lock in between")
	}
	if held == nil {
		t.FailNow()
	}
	if n, err := other.HoldCount(held); err != nil || n != 1 {
		t.Fatalf("the next owner's HoldCount on node 0 = %d, %v; want 1: the re-sent force release deleted its lock", n, err)
	}
	for _, s := range servers[1:] {
		if keyOn(t, s, name) {
			t.Fatalf("server %s still has the lock after ForceUnlock", s.Addr())
		}
	}
	if err := other.Unlock(held); err != nil {
		t.Fatal(err)
	}
}

// TestRedLockQuorumErrorCountsSuccesses: a RedLock held by another owner
// on all 3 nodes is refused by every node that answers; the round stops
// after 2 refusals, and the error must say that no node succeeded (it
// said "1 of 3", counting the node not awaited as a success).
func TestRedLockQuorumErrorCountsSuccesses(t *testing.T) {
	ctx := t.Context()
	_, clients := redLockNodes(t, 3)
	name := "test:" + t.Name()
	// A RedLock's Lock returns once a quorum granted and may leave the
	// third node free; a Mutex per node holds the lock on all three.
	for _, c := range clients {
		m := mustMutex(t, c, name)
		held := mustLock(t, ctx, m)
		defer m.Unlock(held)
	}

	_, err := mustRedLock(t, clients, name).TryLock(ctx)
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) {
		t.Fatalf("TryLock of a RedLock held on every node: %v, want ErrNotObtained and a *QuorumError", err)
	}
	if qe.Succeeded != 0 || !strings.Contains(err.Error(), "0 of 3 nodes succeeded") {
		t.Errorf("Succeeded = %d, error %q; want 0 and \"0 of 3 nodes succeeded\"", qe.Succeeded, err)
	}
	if n := len(qe.Failed); n < 2 || n+qe.Succeeded > qe.Nodes {
		t.Errorf("%d failed nodes of %d, %d succeeded", n, qe.Nodes, qe.Succeeded)
	}
}
