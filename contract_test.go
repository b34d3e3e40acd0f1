package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/contract"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The contract every lock kind keeps (internal/contract), on go-redis:
// every kind on the test server, RedLock on three servers. dlockrueidis
// runs the same suite on rueidis.

// goRedisServer is a single server's deployment, with Clients on go-redis.
func goRedisServer(name, addr string) *contract.Deployment {
	return &contract.Deployment{
		Name: name,
		Client: func(t testing.TB, dial contract.Dialer, opts ...dlock.Option) *dlock.Client {
			rdb := redis.NewClient(&redis.Options{Addr: addr, Dialer: dial})
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := dlock.New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		Masters: func() []string { return []string{addr} },
	}
}

func TestContract(t *testing.T) {
	contract.Run(t, contract.Topology{
		Single: goRedisServer("Single", dlock.RedisAddr()),
		Servers: func(t testing.TB, n int) []*contract.Deployment {
			ds := make([]*contract.Deployment, n)
			for i, s := range redistest.NewServers(t, n) {
				ds[i] = goRedisServer(s.Addr(), s.Addr())
			}
			return ds
		},
		Renewals: dlock.WatchdogLen,
	})
}
