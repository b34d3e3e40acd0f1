package redistest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

const (
	// sentinelMaster is the name the sentinels monitor the master under.
	sentinelMaster = "mymaster"
	// sentinelCount is the number of sentinels; the quorum is 2.
	sentinelCount = 3
	// sentinelReadyTimeout bounds setup and failover.
	sentinelReadyTimeout = 30 * time.Second
)

// Sentinel is a master with one replica, monitored by three sentinels with a
// quorum of two: the smallest setup in which a failover can happen.
type Sentinel struct {
	data      [2]*Server // master and replica as started; roles swap on failover
	sentinels []*Server
}

// StartSentinel starts a master, a replica of it and three sentinels, and
// waits until the sentinels have a quorum and see each other and the synced
// replica. The caller must Close it.
func StartSentinel() (s *Sentinel, err error) {
	// A short replica ping period lets replicas report a non-zero offset
	// and be promoted soon after a sync, even while the master is idle.
	master, err := StartServer("--repl-ping-replica-period", "1")
	if err != nil {
		return nil, err
	}
	replica, err := StartServer("--repl-ping-replica-period", "1",
		"--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	if err != nil {
		_ = master.Close()
		return nil, err
	}
	s = &Sentinel{data: [2]*Server{master, replica}}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	ctx := context.Background()
	// Sentinels learn about replicas from the master's INFO, which they
	// refresh only every 10s; start them after the replica is attached.
	if err := waitUntil(ctx, sentinelReadyTimeout, "replica sync", s.checkReplica); err != nil {
		return nil, err
	}
	s.sentinels, err = redisserver.StartMany(sentinelCount, func(int) (*Server, error) {
		return startProcess("redis-sentinel", func(dir string, port int) ([]string, error) {
			return sentinelArgs(dir, port, master.Port())
		})
	})
	if err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, sentinelReadyTimeout, "sentinels", s.check); err != nil {
		return nil, err
	}
	return s, nil
}

// NewSentinel is StartSentinel for tests: it fails tb on error and closes
// everything when the test ends.
func NewSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s, err := StartSentinel()
	return must(tb, s, err)
}

// sentinelArgs writes a sentinel configuration into dir and returns the
// command line for redis-sentinel. The file must stay writable: sentinels
// persist their state by rewriting it.
func sentinelArgs(dir string, port, masterPort int) ([]string, error) {
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %q
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 5000
sentinel parallel-syncs %[3]s 1
`, port, dir, sentinelMaster, masterPort)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return []string{conf}, nil
}

// MasterName returns the name the sentinels monitor the master under.
func (s *Sentinel) MasterName() string { return sentinelMaster }

// SentinelAddrs returns the addresses of the three sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Sentinels returns the three sentinel processes, for fault injection.
func (s *Sentinel) Sentinels() []*Server { return slices.Clone(s.sentinels) }

// Master returns the current master as reported by the first sentinel that
// answers, or nil if none answers.
func (s *Sentinel) Master() *Server {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range s.sentinels {
		if addr, err := s.masterAddr(ctx, n); err == nil {
			return s.server(addr)
		}
	}
	return nil
}

// Replica returns the data node that is not the current master, or nil if
// no sentinel answers.
func (s *Sentinel) Replica() *Server { return s.other(s.Master()) }

// other returns the data node that is not n, or nil if n is not one.
func (s *Sentinel) other(n *Server) *Server {
	switch n {
	case s.data[0]:
		return s.data[1]
	case s.data[1]:
		return s.data[0]
	}
	return nil
}

// FailoverClient returns a new go-redis client that finds the master through
// the sentinels. The caller must close it.
func (s *Sentinel) FailoverClient() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    sentinelMaster,
		SentinelAddrs: s.SentinelAddrs(),
	})
}

// Failover makes the sentinels promote the replica (SENTINEL FAILOVER) and
// waits until every sentinel reports the new master and it answers ROLE as
// master. If the old master answers, Failover then makes it a replica of
// the new one and waits for the sync, which the sentinels would do only
// after about 10s.
//
// The sentinels look at replicas only every 10s, so for a while after a
// failover they may not yet consider the old master fit for promotion. A
// Failover in that window retries SENTINEL FAILOVER until they do.
func (s *Sentinel) Failover(ctx context.Context) error {
	old := s.Master()
	if old == nil {
		return errors.New("redistest: failover: no sentinel knows the master")
	}
	client := sentinelClient(s.sentinels[0])
	defer client.Close()
	var failed error // a SENTINEL FAILOVER error that retrying will not fix
	err := waitUntil(ctx, sentinelReadyTimeout, "SENTINEL FAILOVER", func(ctx context.Context) error {
		err := client.Failover(ctx, sentinelMaster).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "NOGOODSLAVE") && !strings.HasPrefix(err.Error(), "INPROG") {
			failed = fmt.Errorf("redistest: SENTINEL FAILOVER: %w", err)
			return nil
		}
		return err
	})
	if err = cmp.Or(err, failed); err != nil {
		return err
	}
	master, err := s.AwaitNewMaster(ctx, old)
	if err != nil {
		return err
	}
	// An old master that is down or paused is left to the sentinels.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := old.Do(short, "REPLICAOF", "127.0.0.1", master.Port()); err != nil {
		return nil
	}
	return waitUntil(ctx, sentinelReadyTimeout, "old master sync", s.checkReplica)
}

// Close closes the sentinels and both data nodes.
func (s *Sentinel) Close() error {
	return errors.Join(redisserver.CloseAll(s.sentinels), redisserver.CloseAll(s.data[:]))
}

// server returns the data node with the given address, or nil.
func (s *Sentinel) server(addr string) *Server {
	for _, n := range s.data {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// sentinelClient returns a client for the sentinel n with the options of
// Server.AdminClient. The caller must close it.
func sentinelClient(n *Server) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr:                  n.Addr(),
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
}

// masterAddr asks one sentinel for the master's address.
func (s *Sentinel) masterAddr(ctx context.Context, sentinel *Server) (string, error) {
	client := sentinelClient(sentinel)
	defer client.Close()
	hostPort, err := client.GetMasterAddrByName(ctx, sentinelMaster).Result()
	if err != nil {
		return "", err
	}
	if len(hostPort) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name replied %q", hostPort)
	}
	return hostPort[0] + ":" + hostPort[1], nil
}

// check returns nil once all sentinels agree on the master, which answers
// ROLE as master, the other data node is its synced replica, and every
// sentinel has a quorum and sees the two other sentinels and one replica.
func (s *Sentinel) check(ctx context.Context) error {
	var master string
	for _, n := range s.sentinels {
		addr, err := s.masterAddr(ctx, n)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", n.Addr(), err)
		}
		if master == "" {
			master = addr
		} else if addr != master {
			return fmt.Errorf("sentinels disagree on the master: %s and %s", master, addr)
		}
		if err := checkSentinel(ctx, n); err != nil {
			return fmt.Errorf("sentinel %s: %w", n.Addr(), err)
		}
	}
	m := s.server(master)
	if m == nil {
		return fmt.Errorf("sentinels report unknown master %s", master)
	}
	if err := checkRole(ctx, m, "master"); err != nil {
		return err
	}
	return s.checkReplica(ctx)
}

// checkRole returns nil if n answers ROLE with the given role.
func checkRole(ctx context.Context, n *Server, want string) error {
	reply, err := n.Do(ctx, "ROLE")
	if r, ok := reply.([]any); err != nil || !ok || len(r) == 0 || r[0] != want {
		return fmt.Errorf("%s: ROLE replied %v, %v; want %s", n.Addr(), reply, err, want)
	}
	return nil
}

// checkSentinel checks one sentinel's quorum and view of the group.
func checkSentinel(ctx context.Context, n *Server) error {
	client := sentinelClient(n)
	defer client.Close()
	if err := client.CkQuorum(ctx, sentinelMaster).Err(); err != nil {
		return err
	}
	info, err := client.Master(ctx, sentinelMaster).Result()
	if err != nil {
		return err
	}
	if info["num-other-sentinels"] != "2" || info["num-slaves"] != "1" {
		return fmt.Errorf("num-other-sentinels=%s num-slaves=%s", info["num-other-sentinels"], info["num-slaves"])
	}
	replicas, err := client.Replicas(ctx, sentinelMaster).Result()
	if err != nil {
		return err
	}
	if len(replicas) != 1 {
		return fmt.Errorf("%d replicas", len(replicas))
	}
	r := replicas[0]
	if r["flags"] != "slave" || r["role-reported"] != "slave" || r["master-link-status"] != "ok" || r["master-port"] != info["port"] {
		return fmt.Errorf("replica %s:%s flags=%s role-reported=%s master-link-status=%s master-port=%s (want %s)",
			r["ip"], r["port"], r["flags"], r["role-reported"], r["master-link-status"], r["master-port"], info["port"])
	}
	return nil
}

// checkReplica returns nil once the data node other than the one the
// sentinels report as master (at setup: the second node) replicates from
// the master with master_link_status:up.
func (s *Sentinel) checkReplica(ctx context.Context) error {
	master := s.data[0]
	if s.sentinels != nil {
		if master = s.Master(); master == nil {
			return errors.New("no sentinel knows the master")
		}
	}
	replica := s.other(master)
	info, err := replica.Do(ctx, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("replica %s: %w", replica.Addr(), err)
	}
	text, _ := info.(string)
	port, _ := redisserver.InfoField(text, "master_port")
	link, _ := redisserver.InfoField(text, "master_link_status")
	if port != strconv.Itoa(master.Port()) || link != "up" {
		return fmt.Errorf("replica %s: master_port:%s master_link_status:%s, want %d and up",
			replica.Addr(), port, link, master.Port())
	}
	return nil
}
