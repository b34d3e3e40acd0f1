package dlock_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/contract"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The contract every lock kind keeps (internal/contract), on go-redis:
// every kind on the test server, a Sentinel-watched master and a cluster
// (the package's shared setups), and RedLock on three servers.
// dlockrueidis runs the same suite on rueidis.

// goRedisDeployment is a deployment whose Clients are on the go-redis
// clients that newRedis makes (dialling through dial when not nil).
func goRedisDeployment(name string, newRedis func(dial contract.Dialer) redis.UniversalClient, masters func() []string) *contract.Deployment {
	return &contract.Deployment{
		Name: name,
		Client: func(t testing.TB, dial contract.Dialer, opts ...dlock.Option) *dlock.Client {
			t.Helper()
			rdb := newRedis(dial)
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := dlock.New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		Masters: masters,
	}
}

// goRedisServer is the deployment of one server at addr.
func goRedisServer(name, addr string) *contract.Deployment {
	return goRedisDeployment(name, func(dial contract.Dialer) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr, Dialer: dial})
	}, func() []string { return []string{addr} })
}

func TestContract(t *testing.T) {
	s, cl := dlock.SharedSentinel(t), dlock.SharedCluster(t)
	sentinel := goRedisDeployment("Sentinel", func(dial contract.Dialer) redis.UniversalClient {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(), Dialer: dial})
	}, func() []string { return []string{s.Master().Addr()} })
	cluster := goRedisDeployment("Cluster", func(dial contract.Dialer) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: dial})
	}, func() []string { return serverAddrs(cl.Masters(context.Background())) })
	cluster.Cluster = true
	contract.Run(t, contract.Topology{
		Single:   goRedisServer("Single", dlock.RedisAddr()),
		Sentinel: sentinel,
		Cluster:  cluster,
		Servers: func(t testing.TB, n int) []*contract.Deployment {
			ds := make([]*contract.Deployment, n)
			for i, srv := range redistest.NewServers(t, n) {
				ds[i] = goRedisServer(srv.Addr(), srv.Addr())
			}
			return ds
		},
		Renewals: dlock.WatchdogLen,
	})
}

// serverAddrs returns the servers' addresses.
func serverAddrs(servers []*redistest.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}
