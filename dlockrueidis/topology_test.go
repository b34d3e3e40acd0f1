package dlockrueidis_test

// dlock on rueidis against a Sentinel-watched master and a cluster, beside
// a go-redis Client on the same deployment.

import (
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
