package dlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/driver"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/watchdog"
	"github.com/dlock-go/dlock/internal/workers"
	"github.com/redis/go-redis/v9"
)

// Client creates locks on one Redis deployment and owns what they share:
// the client id that owner names start with, one pub/sub connection for
// every waiter, and one watchdog for every held lock and permit. Create
// one per process and Close it at shutdown. A Client is safe for
// concurrent use.
type Client struct {
	drv driver.Driver // sends every command (internal/driver)
	// rdb and tr are the go-redis client and transport of a Client that
	// New made (nil on another driver's): for tests only, the core goes
	// through drv.
	rdb redis.UniversalClient
	tr  *transport.Transport
	id  string
	cfg config

	// cluster is set for a *redis.ClusterClient: renewals are grouped by slot.
	cluster bool
	// readsReplicas is set for a go-redis cluster client that routes reads
	// to replicas (ReadOnly, RouteByLatency, RouteRandomly): its sharded
	// subscriptions may be on replicas too (fairKind.handsOverByMessage).
	readsReplicas bool
	// deadlines is set when rdb ends every request by its ctx's deadline
	// (honoursDeadlines): an attempt with a deadline runs on the caller's
	// goroutine.
	deadlines bool
	// publish is the command lock scripts publish unlock messages with.
	publish string

	owners   atomic.Uint64
	requests atomic.Uint64
	tickets  atomic.Uint64 // orders each lock's queue of waiters (handoff.go)

	hub      *pubsub.Hub
	watchdog *watchdog.Watchdog[leased] // keeps every lease: holds and permits (renew.go)

	permits permitSet  // permits held, for Close (permit_semaphore.go)
	latches latchWaits // what a latch's waiters share (countdownlatch.go)

	// runners are goroutines for attempts that must not hold up their
	// caller (send.go).
	runners *workers.Pool

	holds  registry       // the holds of the Client's owners (hold.go)
	work   backgroundWork // background operations per owner's hold (background.go)
	queues handoffQueues  // per lock, waiters a release can hand it to (handoff.go)

	closed atomic.Bool   // set by Close, before done is closed
	done   chan struct{} // closed by Close

	record *clientRecord // who this Client is, for dlock status (clientinfo.go)
	waits  *waits        // what its owners wait for, WithDeadlockDetection (deadlock.go); nil without
}

// New returns a Client that uses rdb, the go-redis client the application
// already has: a *redis.Client, *redis.ClusterClient or a failover (Sentinel)
// client. dlock does not close rdb. On a cluster, unless WithShardedPubSub
// is given, New sends one PUBSUB SHARDNUMSUB to choose between sharded and
// classic pub/sub as Redisson does, waiting at most 5 s for the answer.
//
// Set ContextTimeoutEnabled in the options of a plain *redis.Client
// (not a cluster or Sentinel failover client; ReadTimeout and
// WriteTimeout not negative): then go-redis ends each request by its
// ctx's deadline, and a Lock or TryLock whose ctx has a deadline makes
// its attempts on the caller's goroutine. Without it another goroutine
// sends each attempt (or makes it), so that the call can return by its
// deadline while go-redis goes on reading; handing an attempt over and
// back wakes threads twice, which costs about as much as dlock's own
// work in the client for an uncontended Lock+Unlock (BENCHMARKS.md,
// dlock against dlock-ctx). With the option, a ctx with a deadline that
// is cancelled before its deadline is noticed only once the attempt's
// round trip is over: on a frozen server, at the deadline. Such scripts
// are also sent alone rather than batched with other goroutines'
// (internal/transport batch.go).
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	switch rdb := rdb.(type) {
	case nil:
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	case *redis.Client:
		if rdb == nil {
			return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
		}
	case *redis.ClusterClient:
		if rdb == nil {
			return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
		}
	default:
		// A Ring shards keys by its own hash, not by slot: a lock's
		// companion keys and batched renewals would land on other shards.
		return nil, fmt.Errorf("%w: %T is not supported; use a *redis.Client (plain or Sentinel) or a *redis.ClusterClient", ErrInvalidOption, rdb)
	}
	c, err := connect(openGoRedis(rdb), opts)
	if err != nil {
		return nil, err
	}
	g := c.drv.(*goRedis)
	c.rdb, c.tr = g.UniversalClient, g.Transport
	return c, nil
}

// connect returns a Client on the Driver that open makes for its
// options: New's, and through driver.Connect the other drivers' (such as
// dlockrueidis.New).
func connect(open driver.Open, opts []Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	id, err := newClientID()
	if err != nil {
		return nil, fmt.Errorf("dlock: client id: %w", err)
	}
	drv, err := open(driver.Config{Replicas: cfg.replicas.replicas, ReplicaTimeout: cfg.replicas.timeout})
	if err != nil {
		return nil, err
	}
	c := &Client{
		drv:     drv,
		id:      id,
		cfg:     cfg,
		cluster: drv.Cluster(),
		done:    make(chan struct{}),
		runners: workers.New(maxIdleRunners),
	}
	if cfg.deadlocks != nil {
		c.waits = newWaits(c, cfg.deadlocks)
		WithObserver(c.waits.observer())(&c.cfg)
	}
	c.deadlines = drv.Deadlines()
	if cc, ok := drv.Handle().(*redis.ClusterClient); ok {
		o := cc.Options()
		c.readsReplicas = o.ReadOnly || o.RouteByLatency || o.RouteRandomly
	}
	c.record = newClientRecord(c, time.Now())
	c.publish, c.hub = drv.Hub(cfg.shardedPubSub, cfg.logger)
	c.queues.past = pastBound(c.cluster, c.publish)
	c.hub.OnReconnect = c.observeReconnect
	c.hub.OnError = func(err error) {
		c.cfg.logger.Warn("dlock: subscription refused; waiters wake at the lock's TTL instead", "error", err)
	}
	// Each tick of the watchdog ends by the next one: a master that
	// stopped answering must not hold up the renewals bound for the
	// others, nor the next try once the cluster or Sentinel has replaced
	// it (go-redis alone would retry a timed-out command several times).
	c.watchdog = watchdog.New(cfg.watchdogTimeout/3, cfg.batchSize, leased.renewGroup, keep, func(err error) {
		c.drv.Reroute(context.Background(), err)
		c.cfg.logger.Warn("dlock: lease renewal failed; retrying at the next tick", "error", err)
	})
	c.watchdog.ReportLag(c.renewalLag)
	return c, nil
}

// ID returns the Client's random id, a version-8 UUID. Owner names are
// "<id>:<n>", the shape of Redisson's "<uuid>:<threadId>"; the version
// tells them from Redisson's (version 4), so that a fair waiter whose
// holder record is gone is known to be a dead dlock waiter (FairMutex).
func (c *Client) ID() string { return c.id }

// Close stops the watchdog and the pub/sub connection, and deletes the
// Client's holder record if it wrote one (see WithClientName). Locks still
// held are not released: they expire when their lease runs out, and their
// lock contexts are cancelled with cause ErrClosed. Waiting Lock calls
// return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.done)
	holds := c.holds.close() // a Lock that registers later finds it closed

	c.watchdog.Close()
	c.runners.Close()
	c.drv.Shutdown()
	c.permits.close() // permit contexts
	c.observeClosed(holds)
	for _, hd := range holds {
		for _, a := range hd.acqs {
			a.end(ErrClosed)
		}
	}
	err := c.hub.Close()
	c.waits.close()
	c.record.close() // last: it waits for one DEL
	return err
}

func (c *Client) isClosed() bool { return c.closed.Load() }

// newOwner returns an owner name no other acquisition anywhere uses.
func (c *Client) newOwner() string {
	c.record.touch() // the first lock attempt writes the holder record
	return c.id + ":" + strconv.FormatUint(c.owners.Add(1), 10)
}

// newRequest returns an id for a force release's request latch.
func (c *Client) newRequest() string {
	return c.id + ":" + strconv.FormatUint(c.requests.Add(1), 36)
}

// newClientID returns a random version-8 UUID: dlock's client ids are
// told from Redisson's version-4 ones by it (layout.OwnerClientID), so
// that a waiter whose holder record is gone is known to be a dead dlock
// waiter, not a Java one, which writes no record.
func newClientID() (string, error) {
	id, err := newUUID()
	if err != nil {
		return "", err
	}
	return id[:14] + "8" + id[15:], nil
}

// newUUID returns a random (version 4) UUID.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// probeTimeout bounds New's probe of a cluster's sharded pub/sub.
const probeTimeout = 5 * time.Second

// shardedPubSub reports whether unlock messages use sharded pub/sub on rdb:
// as WithShardedPubSub says, or else on a cluster what Redisson's
// shardedSubscriptionMode AUTO picks: sharded if PUBSUB SHARDNUMSUB is
// answered, classic if Redis refuses it (before Redis 7, or an ACL user
// without +pubsub). A cluster that cannot be reached gets sharded pub/sub,
// the choice of every Redis 7 cluster that allows the probe.
func shardedPubSub(rdb redis.UniversalClient, cfg config) bool {
	cc, ok := rdb.(*redis.ClusterClient)
	switch {
	case !ok:
		return false
	case cfg.shardedPubSub != nil:
		return *cfg.shardedPubSub
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := cc.PubSubShardNumSub(ctx).Err()
	switch {
	case err == nil:
		return true
	case isRedisReply(err):
		cfg.logger.Info("dlock: PUBSUB SHARDNUMSUB refused; unlock messages use PUBLISH and SUBSCRIBE, as Redisson's AUTO mode does", "error", err)
		return false
	}
	cfg.logger.Warn("dlock: could not probe the cluster for sharded pub/sub; using SPUBLISH and SSUBSCRIBE (set WithShardedPubSub to choose)", "error", err)
	return true
}

// newHub returns the publish command for lock scripts and the hub waiters
// subscribe through. On a cluster, sharded pub/sub (Redis 7) delivers an
// unlock message within the lock's shard only, where classic PUBLISH is
// broadcast over the cluster bus to every node.
func newHub(rdb redis.UniversalClient, sharded bool) (string, *pubsub.Hub) {
	if cc, ok := rdb.(*redis.ClusterClient); ok && sharded {
		// One connection per master: the hub groups channels by the
		// address of the master the routing table names, and go-redis's
		// cluster PubSub connects to the master of its first SSUBSCRIBE.
		return "spublish", pubsub.NewSharded(
			func(ctx context.Context, _ string) pubsub.Conn { return cc.SSubscribe(ctx) },
			clusterRouter(cc))
	}
	return "publish", pubsub.New(func(ctx context.Context) pubsub.Conn { return rdb.Subscribe(ctx) })
}

// clusterRouter routes the sharded hub's channels by cc's slot table.
func clusterRouter(cc *redis.ClusterClient) pubsub.Router {
	return pubsub.Router{
		Slot: func(channel string) int { return int(layout.Slot(channel)) },
		Node: func(ctx context.Context, channel string) string {
			if m, err := cc.MasterForKey(ctx, channel); err == nil {
				return m.Options().Addr
			}
			return ""
		},
		// ReloadState only starts a reload, which the channels moved
		// next would not see: ForEachMaster reloads the table before it
		// returns, and has nothing to do on the masters. go-redis may
		// not end its read of CLUSTER SLOTS when ctx is cancelled, so
		// the caller waits for it only within ctx (pubsub.Reload).
		Refresh: func(ctx context.Context) {
			pubsub.Reload(ctx, func(ctx context.Context) {
				_ = cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
			})
		},
	}
}

// Ping checks that Redis answers, for a service that wants to fail at
// startup rather than at its first Lock. On a cluster it asks every master.
// The error wraps ErrUnreachable and the Redis client's error.
func (c *Client) Ping(ctx context.Context) error {
	if c == nil {
		return fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	var err error
	if c.cluster {
		err = c.drv.Masters(ctx, func(ctx context.Context, m driver.Commands) error {
			return m.Ping(ctx).Err()
		})
	} else {
		err = c.drv.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return nil
}
