package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
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

	servers[2].Kill()
	_, err = l.TryLock(ctx)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with 3 of 5 servers down: %v, want ErrNotObtained", err)
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

	// Lock retries until ctx ends, and still says which nodes failed.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = l.Lock(wctx)
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with 3 of 5 servers down: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if got := failedAddrs(t, err); !slices.Equal(got, down) {
		t.Fatalf("failed nodes %v, want %v", got, down)
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
	if valid := lease - l.k.drift(lease); elapsed < valid {
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
	wg.Wait()
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
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock with 2 frozen and 1 dead: %v, want ErrNotObtained and a node DeadlineExceeded", err)
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
