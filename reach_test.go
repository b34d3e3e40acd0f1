package dlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// refused is the error of a dial that Redis refused.
var refused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// TestGateOpensOnWorkingPool: new connections cannot be opened (here the
// Dialer refuses; in life the Sentinels are down, or DNS) but the pool's
// connections work. The gate that a failed dial shut must open again
// through them: Locks go on and held locks are renewed.
func TestGateOpensOnWorkingPool(t *testing.T) {
	ctx := context.Background()
	var g dialGate
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: g.dial, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	if err := m.Unlock(mustLock(t, ctx, m)); err != nil { // the pool has a connection
		t.Fatal(err)
	}
	g.hold = make(chan struct{}) // the prober's first dial waits here
	g.shut.Store(true)
	c.tr.Gate().Saw(refused)
	if !errors.Is(c.tr.Gate().Err(), ErrUnreachable) {
		t.Fatal("a failed dial did not shut the gate")
	}
	close(g.hold)
	eventually(t, 5*time.Second, func() error { return c.tr.Gate().Err() })
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with new connections refused and the pool's working: %v", err)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestRedLockIgnoresFirstClientGate: the first server of a RedLock is
// down and its Client's gate shut; the other two are a quorum, and the
// RedLock must still be taken and released.
func TestRedLockIgnoresFirstClientGate(t *testing.T) {
	ctx := context.Background()
	servers, clients := redLockNodes(t, 3)
	l := mustRedLock(t, clients, "test:"+t.Name())
	servers[0].Kill()
	clients[0].tr.Gate().Saw(refused)
	if !errors.Is(clients[0].tr.Gate().Err(), ErrUnreachable) {
		t.Fatal("the first Client's gate is open")
	}
	lctx, err := l.TryLock(ctx)
	if err != nil {
		t.Fatalf("RedLock TryLock with 2 of 3 servers up: %v", err)
	}
	if err := l.Unlock(lctx); err != nil {
		t.Fatalf("RedLock Unlock with 2 of 3 servers up: %v", err)
	}
}

// countingDial is a Dialer that counts its dials and refuses them, as a
// stopped Redis does, while shut is set.
type countingDial struct {
	shut atomic.Bool
	n    atomic.Int64
}

func (d *countingDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	if d.shut.Load() {
		return nil, refused
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// TestLockWaitsOutOutage: a Lock called while Redis cannot be reached
// waits for it, as long as its ctx allows, rather than failing at once
// with ErrUnreachable; TryLock fails at once.
func TestLockWaitsOutOutage(t *testing.T) {
	ctx := context.Background()
	proxy := redistest.NewTestProxy(t, redisAddr)
	var d countingDial
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: d.dial, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	if err := m.Unlock(mustLock(t, ctx, m)); err != nil {
		t.Fatal(err)
	}
	d.shut.Store(true)
	proxy.CloseAll()
	if _, err := m.TryLock(ctx); err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock in an outage: %v, want a connection error", err)
	}
	eventually(t, 5*time.Second, func() error { // the gate is shut
		if c.tr.Gate().Err() == nil {
			return errors.New("the gate is open")
		}
		return nil
	})
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("TryLock behind the shut gate: %v, want ErrUnreachable", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := m.Lock(lctx)
		if err == nil {
			err = m.Unlock(l)
		}
		got <- err
	}()
	for probes := d.n.Load() + 3; d.n.Load() < probes; { // the prober dials three more times
		select {
		case err := <-got:
			t.Fatalf("Lock returned while Redis could not be reached: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	d.shut.Store(false)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Lock once Redis was back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return once Redis was back")
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestSawWrapsFirstDialFailure: the error of the first command that finds
// Redis unreachable (a port with no listener) is reported wrapping
// ErrUnreachable, as those of the commands after it are, not as a bare
// "connection refused"; errors that are not a failed dial are passed on
// as they are.
func TestSawWrapsFirstDialFailure(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	dialErr := rdb.Ping(t.Context()).Err()
	if !transport.DialFailed(dialErr) {
		t.Fatalf("PING on a closed port: %v, want a failed dial", dialErr)
	}
	if err := c.tr.Gate().Err(); err != nil {
		t.Fatalf("gate shut before any failure was seen: %v", err)
	}
	err := c.tr.Gate().Saw(dialErr)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("saw(first dial failure) = %v, want ErrUnreachable wrapping the dial's error", err)
	}
	if !errors.Is(c.tr.Gate().Err(), ErrUnreachable) {
		t.Error("a failed dial did not shut the gate")
	}
	if err := c.tr.Gate().Saw(err); strings.Count(err.Error(), ErrUnreachable.Error()) != 1 {
		t.Errorf("saw of an error wrapping ErrUnreachable wrapped it again: %v", err)
	}
	for _, other := range []error{nil, redis.Nil, errors.New("NOPERM no permissions")} {
		if err := c.tr.Gate().Saw(other); err != other {
			t.Errorf("saw(%v) = %v, want it unchanged", other, err)
		}
	}
}

// TestFirstCallUnreachable: the very first TryLock and Lock of a Client
// whose Redis does not listen fail with ErrUnreachable, as later calls do,
// not with go-redis's bare dial error.
func TestFirstCallUnreachable(t *testing.T) {
	for _, try := range []bool{true, false} {
		name := "Lock"
		if try {
			name = "TryLock"
		}
		t.Run(name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t)})
			t.Cleanup(func() { _ = rdb.Close() })
			m := mustMutex(t, newClient(t, rdb), lockName(t))
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			lock := m.Lock
			if try {
				lock = m.TryLock
			}
			if _, err := lock(ctx); !errors.Is(err, ErrUnreachable) {
				t.Fatalf("first %s on a closed port: %v, want ErrUnreachable", name, err)
			}
		})
	}
}

// TestGiveBackQuietWhileUnreachable: when Redis cannot be reached at all,
// the give-back of a failed attempt logs its failure at debug level, not
// as a warning: nothing was taken, and the outage is the error the caller
// already has.
func TestGiveBackQuietWhileUnreachable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var logs syncBuf
	c := newClient(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	m := mustMutex(t, c, lockName(t), WithLease(300*time.Millisecond))
	if _, err := m.TryLock(t.Context()); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("TryLock on a closed port: %v, want ErrUnreachable", err)
	}
	const line = "giving back a lock this owner may hold failed"
	eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), line) {
			return errors.New("the give-back has not given up yet")
		}
		return nil
	})
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, line) && !strings.Contains(l, "level=DEBUG") {
			t.Errorf("give-back failure logged above debug while Redis was unreachable: %s", l)
		}
	}
}
