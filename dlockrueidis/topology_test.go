package dlockrueidis_test

// dlock on rueidis against a Sentinel-watched master and a cluster, beside
// a go-redis Client on the same deployment.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// newClientOn returns a dlock Client on a new rueidis client with opt,
// both closed with t.
func newClientOn(t *testing.T, opt rueidis.ClientOption) *dlock.Client {
	t.Helper()
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	c, err := dlockrueidis.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSentinel: on a Sentinel-watched master, a rueidis Client and a
// go-redis failover Client exclude each other and wake each other's
// waiters, before and after a failover.
func TestSentinel(t *testing.T) {
	s := redistest.NewSentinel(t)
	opt := rueidis.ClientOption{InitAddress: s.SentinelAddrs(), Sentinel: rueidis.SentinelOption{MasterSet: s.MasterName()}}
	r := newClientOn(t, opt)
	rdb := s.FailoverClient()
	t.Cleanup(func() { _ = rdb.Close() })
	g, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	both := func(t *testing.T) {
		for _, k := range lockerKinds {
			t.Run(k.name, func(t *testing.T) {
				l, w := k.open(t, r, g, testName(t))
				exclude(t, l, w)
				l, w = k.open(t, g, r, testName(t)+":back")
				exclude(t, l, w)
			})
		}
	}
	t.Run("Before", both)
	if err := s.Failover(boundedCtx(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Run("AfterFailover", both)
}

// TestCluster: on a cluster, every kind between a rueidis Client and a
// go-redis cluster Client (sharded pub/sub on both), and Ping, which asks
// every master.
func TestCluster(t *testing.T) {
	cl := redistest.NewCluster(t)
	r := newClientOn(t, rueidis.ClientOption{InitAddress: cl.Addrs()})
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	g, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	if err := r.Ping(boundedCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, k := range lockerKinds {
		t.Run(k.name, func(t *testing.T) {
			l, w := k.open(t, r, g, testName(t))
			exclude(t, l, w)
			l, w = k.open(t, g, r, testName(t)+":back")
			exclude(t, l, w)
			l, w = k.open(t, r, newClientOn(t, rueidis.ClientOption{InitAddress: cl.Addrs()}), testName(t)+":both")
			exclude(t, l, w)
		})
	}
}

// TestRedLock: a RedLock over three servers with rueidis Clients excludes
// one with go-redis Clients on the same servers, both ways.
func TestRedLock(t *testing.T) {
	servers := redistest.NewServers(t, 3)
	var rs, gs []*dlock.Client
	for _, s := range servers {
		rs = append(rs, newClientOn(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		g, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		gs = append(gs, g)
	}
	name := testName(t)
	exclude(t, must(dlock.NewRedLock(rs, name)), must(dlock.NewRedLock(gs, name)))
	exclude(t, must(dlock.NewRedLock(gs, name)), must(dlock.NewRedLock(rs, name)))
}

// TestClusterClassicFallback: on a cluster whose user may not run PUBSUB
// SHARDNUMSUB, a rueidis Client falls back to classic pub/sub as a go-redis
// Client does (Redisson's AUTO mode), so that each hears the other's
// unlock: a rueidis waiter subscribes with SUBSCRIBE and is woken by the
// go-redis holder's PUBLISH.
func TestClusterClassicFallback(t *testing.T) {
	cl := redistest.NewCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := boundedCtx(t, 30*time.Second)
	err := rdb.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.Do(ctx, "ACL", "SETUSER", "noshard", "on", ">pw", "~*", "&*", "+@all", "-pubsub|shardnumsub").Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newClientOn(t, rueidis.ClientOption{InitAddress: cl.Addrs(), Username: "noshard", Password: "pw"})
	grdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "noshard", Password: "pw"})
	t.Cleanup(func() { _ = grdb.Close() })
	g, err := dlock.New(grdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	name := testName(t)
	subscribedClassic := func(ctx context.Context) bool {
		found := false
		_ = rdb.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			chans, err := n.PubSubChannels(ctx, "*"+name+"*").Result()
			if err == nil && len(chans) > 0 {
				found = true
			}
			return nil
		})
		return found
	}
	gm, err := g.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := r.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	exclude(t, gm, rm, subscribedClassic)
}

// TestRedLockSameServerRefused: NewRedLock refuses two rueidis Clients on
// the same server (each its own rueidis client), as it refuses two
// go-redis ones: a quorum of one server is no quorum.
func TestRedLockSameServerRefused(t *testing.T) {
	servers := redistest.NewServers(t, 3)
	var cs []*dlock.Client
	for _, s := range servers {
		cs = append(cs, newClientOn(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
	}
	again := newClientOn(t, rueidis.ClientOption{InitAddress: []string{servers[0].Addr()}})
	if _, err := dlock.NewRedLock([]*dlock.Client{cs[0], cs[1], again}, testName(t)); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("NewRedLock with the same server twice = %v, want ErrInvalidOption", err)
	}
	if _, err := dlock.NewRedLock(cs, testName(t)); err != nil {
		t.Fatalf("NewRedLock on three servers: %v", err)
	}
}
