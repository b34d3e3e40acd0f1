package dlocktest_test

// dlock's contract suite (internal/contract), run on the embedded server:
// the fidelity that docs/testing.md states.

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/contract"
	"github.com/redis/go-redis/v9"
)

// embedded is the contract's deployment of one embedded server.
func embedded(t testing.TB, name string) *contract.Deployment {
	srv := dlocktest.NewServer(t)
	return &contract.Deployment{
		Name: name,
		Client: func(t testing.TB, dial contract.Dialer, opts ...dlock.Option) *dlock.Client {
			t.Helper()
			o := srv.Options()
			if dial != nil {
				o.Dialer = dial
			}
			rdb := redis.NewClient(o)
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := dlock.New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		Masters: func() []string { return []string{srv.Addr()} },
	}
}

func TestContract(t *testing.T) {
	contract.Run(t, contract.Topology{
		Single: embedded(t, "Embedded"),
		Skip: map[string]string{
			"MissedNotice": "the embedded server has no CLIENT KILL to cut a waiter's subscription; dlock's own suite runs it on real Redis",
		},
		Servers: func(t testing.TB, n int) []*contract.Deployment {
			ds := make([]*contract.Deployment, n)
			for i := range ds {
				ds[i] = embedded(t, "Embedded")
			}
			return ds
		},
	})
}
