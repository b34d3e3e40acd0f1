// Package dlocktest runs code that uses dlock in unit tests without
// installing Redis: New returns a dlock Client on an in-process server
// (github.com/alicebob/miniredis/v2) that the test starts and closes, and
// NewServer returns the server itself, with helpers to test failure
// handling: FastForward (leases run out, lock contexts end with
// dlock.ErrLockLost), Stop and Restart (dlock.ErrUnreachable, then
// recovery) and Flush.
//
// Set DLOCK_TEST_REDIS_URL (a redis:// URL, as dlock's command line
// takes) to run the same tests on a real Redis server instead, as in CI:
// then FastForward, Stop and Restart skip the test that calls them, since
// they cannot move a real server's clock or stop it.
//
// The embedded server is one Redis server. What dlock needs beyond that
// fails at once with an error that names the limitation and says to set
// DLOCK_TEST_REDIS_URL: replica acknowledgements (WAIT,
// dlock.WithReplicaSync), sharded pub/sub (dlock.WithShardedPubSub), a
// Redis Cluster client (CLUSTER) and a Sentinel client (SENTINEL). Every
// lock kind, synchronizer and election works on it: docs/testing.md
// lists what dlock's contract suite checks there.
//
// This package is a module of its own, so that miniredis reaches only the
// builds that import it: the dlock library never imports miniredis.
package dlocktest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// EnvRedisURL names the environment variable that, when set, points the
// kit at a real Redis server instead of the embedded one, e.g.
// redis://127.0.0.1:6379/15. Its data is the test's: Flush deletes the
// database's keys.
const EnvRedisURL = "DLOCK_TEST_REDIS_URL"

// New returns a dlock Client, made with opts, on a new server for t: the
// embedded one, started now, or the one DLOCK_TEST_REDIS_URL names. The
// Client, its Redis connections and an embedded server are closed when t
// ends. Another Client on the same server (as another process would
// have) comes from NewServer(t).Client.
func New(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return NewServer(t).Client(t, opts...)
}

// Server is a Redis server for tests: embedded (in-process), or the real
// one DLOCK_TEST_REDIS_URL names. A server of NewServer belongs to its
// test: call its methods from that test's goroutine (a subtest makes a
// server of its own). A server of Start belongs to no test.
type Server struct {
	t   testing.TB
	mr  *miniredis.Miniredis // nil on a real server
	opt *redis.Options       // how Clients connect

	// ahead is how far the embedded server's clock (TIME, the TTLs) is
	// ahead of the wall clock, in nanoseconds: what FastForward added.
	ahead atomic.Int64

	mu      sync.Mutex
	stopped bool
	door    net.Listener // where clients connect (open); closed while stopped

	connsMu sync.Mutex
	conns   []net.Conn // the connections that came in by the door
}

// NewServer returns a server for t: an embedded one, started now on a
// free loopback port and closed when t ends, or, when
// DLOCK_TEST_REDIS_URL is set, the real server it names (reached, not
// flushed: give each test names of its own, or call Flush). On the
// embedded server keys expire in real time, as on Redis; FastForward
// moves its clock ahead.
func NewServer(t testing.TB) *Server {
	t.Helper()
	if url := os.Getenv(EnvRedisURL); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("dlocktest: %s=%q: %v", EnvRedisURL, url, err)
		}
		s := &Server{t: t, opt: opt}
		s.ping()
		return s
	}
	s, err := startEmbedded()
	if err != nil {
		t.Fatalf("dlocktest: %v", err)
	}
	s.t = t
	t.Cleanup(s.Close)
	return s
}

// Start starts an embedded server that belongs to no test, for a
// package's TestMain or an Example: close it with Close. It ignores
// DLOCK_TEST_REDIS_URL (use NewServer in the tests that should follow
// it), so its helpers always work; one that Restart cannot bind to its
// address again stays stopped, and dlock calls on it fail with
// dlock.ErrUnreachable.
func Start() (*Server, error) { return startEmbedded() }

// startEmbedded starts an embedded server on a free loopback port.
func startEmbedded() (*Server, error) {
	mr := miniredis.NewMiniRedis()
	s := &Server{mr: mr}
	// Keys expire as the clock advances, as on Redis, not only on
	// FastForward (miniredis's default).
	mr.ClockTTL(true)
	// Dial starts the server with no listener of its own: clients come in
	// through the kit's front door (open), which Stop closes and Restart
	// opens again while the server, its commands and its hook stay up. A
	// miniredis restart listens before it has its commands and the hook,
	// and answers "unknown command" to a client that reconnects at once.
	c, err := mr.Dial()
	if err != nil {
		return nil, fmt.Errorf("starting the embedded server: %w", err)
	}
	_ = c.Close()
	mr.Server().SetPreHook(s.hook) // before anyone knows the address
	if err := s.open("127.0.0.1:0"); err != nil {
		mr.Close()
		return nil, fmt.Errorf("starting the embedded server: %w", err)
	}
	s.opt = &redis.Options{Addr: s.door.Addr().String()}
	return s, nil
}

// open listens on addr and serves every connection accepted there with
// the embedded server. s.mu must be held, or s not yet shared.
func (s *Server) open(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.door = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed by shut
			}
			s.connsMu.Lock()
			s.conns = append(s.conns, conn)
			s.connsMu.Unlock()
			s.mr.Server().ServeConn(conn)
		}
	}()
	return nil
}

// shut closes the front door and every connection that came through it,
// as a server that went down. s.mu must be held.
func (s *Server) shut() {
	_ = s.door.Close()
	s.connsMu.Lock()
	conns := s.conns
	s.conns = nil
	s.connsMu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Close stops the embedded server for good and closes its connections;
// NewServer's servers are closed when their test ends. On a real server
// it does nothing.
func (s *Server) Close() {
	if s.mr == nil {
		return
	}
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		s.shut()
	}
	s.mu.Unlock()
	s.mr.Close()
}

// ping fails the test unless the real server answers.
func (s *Server) ping() {
	s.t.Helper()
	rdb := redis.NewClient(s.opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		s.t.Fatalf("dlocktest: %s: the server at %s does not answer: %v", EnvRedisURL, s.opt.Addr, err)
	}
}

// Embedded reports whether s is the embedded server (false: the real one
// DLOCK_TEST_REDIS_URL names).
func (s *Server) Embedded() bool { return s.mr != nil }

// Addr returns the server's address, host:port (a unix socket's path for
// a unix:// DLOCK_TEST_REDIS_URL).
func (s *Server) Addr() string { return s.opt.Addr }

// Options returns go-redis options that connect to the server, for code
// under test that makes its own go-redis client.
func (s *Server) Options() *redis.Options {
	o := *s.opt
	return &o
}

// Redis returns a new go-redis client on the server, closed when t ends:
// to look at or change what dlock keeps there.
func (s *Server) Redis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Client returns a new dlock Client, made with opts, on the server: one
// per process the test stands in for. It and its Redis connections are
// closed when t ends. An invalid option fails the test.
func (s *Server) Client(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := s.Redis(t)
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("dlocktest: dlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// FastForward moves the embedded server's clock d ahead: every TTL
// shrinks by d and TIME jumps by d, so that leases (a lock's, a
// PermitSemaphore permit's, an election's) shorter than d run out at
// once, as if d had passed. The Clients' own clocks do not move: a
// holder hears of its loss when its watchdog next renews or checks its
// hold, a third of WithWatchdogTimeout later (10 s by default: give the
// Clients of such a test a short one, e.g.
// dlock.WithWatchdogTimeout(time.Second)); its lock context then ends
// with the cause dlock.ErrLockLost. On a real server FastForward skips
// the test (t.Skip), saying so.
func (s *Server) FastForward(d time.Duration) {
	if s.t != nil {
		s.t.Helper()
	}
	s.embeddedOnly("FastForward")
	if d <= 0 {
		return
	}
	s.ahead.Add(int64(d))
	s.mr.FastForward(d)
}

// Stop shuts the embedded server down, as an outage would: its
// connections close and new ones are refused. The first dlock call to
// find its connection dead fails after go-redis's own retries (about
// 2 s); from then on TryLock, Ping and the synchronizers' calls fail at
// once with dlock.ErrUnreachable, while Lock waits for Redis as long as
// its ctx allows. Holders whose leases run out meanwhile lose their
// locks. Restart brings it back. On a real server Stop skips the test
// (t.Skip).
func (s *Server) Stop() {
	if s.t != nil {
		s.t.Helper()
	}
	s.embeddedOnly("Stop")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.shut()
}

// Restart starts a stopped embedded server again on the same address,
// with its data: keys whose TTL ran out while it was down are gone, as on
// a Redis server that restarts from its persistence (call Flush too for
// one that restarts empty). Clients reconnect by themselves. A server
// that runs is left as it is. On a real server Restart skips the test
// (t.Skip).
func (s *Server) Restart() {
	if s.t != nil {
		s.t.Helper()
	}
	s.embeddedOnly("Restart")
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		return
	}
	if err := s.open(s.opt.Addr); err != nil {
		if s.t == nil {
			return // stays stopped: dlock calls fail with ErrUnreachable
		}
		s.t.Fatalf("dlocktest: restarting the embedded server on %s: %v", s.opt.Addr, err)
	}
	s.stopped = false
}

// Flush deletes every key of the server's database (FLUSHDB): every
// lock, semaphore, latch and election record is gone at once, as after a
// restart without persistence. Holders hear of it at their watchdog's
// next check (see FastForward). On a real server it deletes the keys of
// the database DLOCK_TEST_REDIS_URL names.
func (s *Server) Flush() {
	if s.mr != nil {
		s.mr.FlushDB()
		return
	}
	rdb := redis.NewClient(s.opt)
	defer rdb.Close()
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		s.t.Fatalf("dlocktest: FLUSHDB on %s: %v", s.opt.Addr, err)
	}
}

// embeddedOnly skips the test, naming the helper, on a real server.
func (s *Server) embeddedOnly(helper string) {
	if s.mr == nil {
		s.t.Helper()
		s.t.Skipf("dlocktest: %s needs the embedded server; %s points at a real one (%s), whose clock and process a test cannot control", helper, EnvRedisURL, s.opt.Addr)
	}
}

// unsupported are the commands dlock may send that the embedded server
// cannot honour, and the dlock feature that sends each. The hook refuses
// them with an error naming the limitation: miniredis would otherwise
// answer WAIT with 0 replicas, fake a one-node cluster, or say only
// "unknown command".
var unsupported = map[string]string{
	"WAIT":         "replica acknowledgements (dlock.WithReplicaSync): the embedded server has no replicas",
	"WAITAOF":      "replica acknowledgements (dlock.WithReplicaSync): the embedded server has no replicas",
	"SSUBSCRIBE":   "sharded pub/sub (dlock.WithShardedPubSub, Redis Cluster)",
	"SUNSUBSCRIBE": "sharded pub/sub (dlock.WithShardedPubSub, Redis Cluster)",
	"SPUBLISH":     "sharded pub/sub (dlock.WithShardedPubSub, Redis Cluster)",
	"CLUSTER":      "Redis Cluster: the embedded server is one server, not a cluster",
	"READONLY":     "Redis Cluster: the embedded server is one server, not a cluster",
	"ASKING":       "Redis Cluster: the embedded server is one server, not a cluster",
	"SENTINEL":     "Sentinel: the embedded server is one server, not a Sentinel",
}

// refusal returns the error text with which the embedded server refuses
// cmd, or "" when it runs cmd.
func refusal(cmd string) string {
	what, ok := unsupported[cmd]
	if !ok {
		return ""
	}
	return fmt.Sprintf("ERR dlocktest: %s is not supported by the embedded server (miniredis): %s; run this test on real Redis: set %s", cmd, what, EnvRedisURL)
}

// hook runs before every command the embedded server receives, those of
// scripts included: it refuses what the server cannot honour and answers
// TIME with the server's clock (the wall clock plus what FastForward
// added), so that the deadlines scripts compute from TIME (a
// PermitSemaphore's leases, a fair lock's queue) move with the TTLs.
func (s *Server) hook(c *server.Peer, cmd string, args ...string) bool {
	if msg := refusal(cmd); msg != "" {
		c.WriteError(msg)
		return true
	}
	if cmd == "PUBSUB" && len(args) > 0 {
		// No sharded subscription can exist (SSUBSCRIBE is refused): the
		// sharded counts are empty, as on a server where nobody used them.
		switch strings.ToUpper(args[0]) {
		case "SHARDCHANNELS":
			c.WriteLen(0)
			return true
		case "SHARDNUMSUB":
			c.WriteLen(2 * len(args[1:]))
			for _, ch := range args[1:] {
				c.WriteBulk(ch)
				c.WriteInt(0)
			}
			return true
		}
	}
	if cmd == "TIME" && len(args) == 0 {
		now := time.Now().Add(time.Duration(s.ahead.Load()))
		c.WriteLen(2)
		c.WriteBulk(strconv.FormatInt(now.Unix(), 10))
		c.WriteBulk(strconv.Itoa(now.Nanosecond() / 1000))
		return true
	}
	return false
}
