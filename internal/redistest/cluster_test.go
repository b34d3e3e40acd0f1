package redistest_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.NewCluster(t)
	if n := len(c.Nodes()); n != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, want 6", n)
	}
	client := c.Client()
	defer client.Close()

	masters := map[*redistest.Server]bool{}
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := client.Set(ctx, key, "v-"+key, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := client.Get(ctx, key).Result(); err != nil || got != "v-"+key {
			t.Fatalf("GET %s = %q, %v", key, got, err)
		}

		// The node MasterFor names must serve the key itself, without
		// a MOVED redirect, and be a master.
		m := c.MasterFor(key)
		if m == nil {
			t.Fatalf("MasterFor(%q) = nil", key)
		}
		masters[m] = true
		if got, err := m.Do(ctx, "GET", key); err != nil || got != "v-"+key {
			t.Fatalf("GET %s on MasterFor node %s = %v, %v", key, m.Addr(), got, err)
		}
		role, err := m.Do(ctx, "ROLE")
		if r, _ := role.([]any); err != nil || len(r) == 0 || r[0] != "master" {
			t.Fatalf("MasterFor(%q) = %s with ROLE %v, %v", key, m.Addr(), role, err)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("keys landed on %d masters, want 3", len(masters))
	}
}
