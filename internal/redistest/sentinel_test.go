package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.NewSentinel(t)
	if s.MasterName() != "mymaster" || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("MasterName() = %q, SentinelAddrs() = %v", s.MasterName(), s.SentinelAddrs())
	}
	client := s.FailoverClient()
	defer client.Close()
	if err := client.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}

	old, replica := s.Master(), s.Replica()
	if old == nil || replica == nil || old == replica {
		t.Fatalf("Master() = %v, Replica() = %v", old, replica)
	}
	if err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Master() != replica || s.Replica() != old {
		t.Fatalf("after Failover: Master() = %s, Replica() = %s; want %s and %s",
			s.Master().Addr(), s.Replica().Addr(), replica.Addr(), old.Addr())
	}

	// The failover client follows the switch; a write may still hit the
	// demoted master (READONLY) or a closed connection until it has.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := client.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET after failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := s.Master().Do(ctx, "GET", "k"); err != nil || got != "after" {
		t.Fatalf("GET k on new master = %v, %v", got, err)
	}

	// Failover leaves a steady group, so it can be repeated.
	if err := s.Failover(ctx); err != nil {
		t.Fatalf("second Failover: %v", err)
	}
	if s.Master() != old {
		t.Fatalf("after second Failover: Master() = %s, want %s", s.Master().Addr(), old.Addr())
	}
}
