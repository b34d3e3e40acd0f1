package dlockrueidis_test

// The contract every lock kind keeps (internal/contract), on rueidis: the
// same suite as package dlock's TestContract runs on go-redis, here on a
// single server, a Sentinel-watched master and a cluster, and RedLock on
// three servers.

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/internal/contract"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

// rueidisDeployment is a deployment whose Clients are on rueidis clients
// made with opt (and the suite's dialer, when it gives one).
func rueidisDeployment(name string, opt rueidis.ClientOption, masters func() []string) *contract.Deployment {
	return &contract.Deployment{
		Name: name,
		Client: func(t testing.TB, dial contract.Dialer, opts ...dlock.Option) *dlock.Client {
			t.Helper()
			o := opt
			o.DisableCache = true
			if dial != nil {
				o.DialCtxFn = func(ctx context.Context, dst string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
					return dial(ctx, "tcp", dst)
				}
			}
			rc, err := rueidis.NewClient(o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rc.Close)
			c, err := dlockrueidis.New(rc, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		Masters: masters,
	}
}

// single is the deployment of one server at addr.
func single(name, addr string) *contract.Deployment {
	return rueidisDeployment(name, rueidis.ClientOption{InitAddress: []string{addr}}, func() []string { return []string{addr} })
}

func TestContract(t *testing.T) {
	s := redistest.NewSentinel(t)
	cl := redistest.NewCluster(t)
	cluster := rueidisDeployment("Cluster", rueidis.ClientOption{InitAddress: cl.Addrs()},
		func() []string { return addrs(cl.Masters(context.Background())) })
	cluster.Cluster = true
	contract.Run(t, contract.Topology{
		Single: single("Single", redisAddr),
		Sentinel: rueidisDeployment("Sentinel",
			rueidis.ClientOption{InitAddress: s.SentinelAddrs(), Sentinel: rueidis.SentinelOption{MasterSet: s.MasterName()}},
			func() []string { return []string{s.Master().Addr()} }),
		Cluster: cluster,
		Servers: func(t testing.TB, n int) []*contract.Deployment {
			ds := make([]*contract.Deployment, n)
			for i, srv := range redistest.NewServers(t, n) {
				ds[i] = single(srv.Addr(), srv.Addr())
			}
			return ds
		},
	})
}

// addrs returns the servers' addresses.
func addrs(servers []*redistest.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}
