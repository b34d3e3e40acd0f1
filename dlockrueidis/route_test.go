package dlockrueidis_test

// The rueidis driver's sharded hub keeps one pub/sub connection per
// master, however many slots its waiters span, and subscribes every slot
// again after its connections are killed.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

// TestClusterSubscriptionsPerMaster: a rueidis Client waiting on 40 locks
// in 40 slots holds at most one pub/sub connection per master; after
// CLIENT KILL of those connections every channel is subscribed again and
// every waiter is woken by its unlock.
func TestClusterSubscriptionsPerMaster(t *testing.T) {
	cl := redistest.NewCluster(t)
	ctx := boundedCtx(t, 120*time.Second)
	holder := newClientOn(t, rueidis.ClientOption{InitAddress: cl.Addrs()})
	waiter := newClientOn(t, rueidis.ClientOption{InitAddress: cl.Addrs()})
	masters := cl.Masters(ctx)
	before := pubsubConns(ctx, cl)
	var names []string
	var held []context.Context
	var waits []chan error
	for i := range 40 {
		name := fmt.Sprintf("%s:{%d}", testName(t), i)
		names = append(names, name)
		held = append(held, must(must(holder.NewMutex(name, dlock.WithLease(60*time.Second))).Lock(ctx)))
		done := make(chan error, 1)
		m := must(waiter.NewMutex(name, dlock.WithLease(60*time.Second)))
		go func() {
			lctx, err := m.Lock(ctx)
			if err == nil {
				err = m.Unlock(lctx)
			}
			done <- err
		}()
		waits = append(waits, done)
	}
	check := func() error {
		if err := shardSubscribed(ctx, cl, names); err != nil {
			return err
		}
		if got := pubsubConns(ctx, cl); got > before+len(masters) {
			return fmt.Errorf("%d pub/sub connections for %d masters (%d before)", got, len(masters), before)
		}
		return nil
	}
	eventually(t, 20*time.Second, check)
	for _, m := range masters {
		if _, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, check)
	for i, name := range names {
		if err := must(holder.NewMutex(name)).Unlock(held[i]); err != nil {
			t.Fatal(err)
		}
		awaitDone(t, waits[i], 10*time.Second, "waiter on "+name)
	}
}

// pubsubConns counts the pub/sub connections on every node.
func pubsubConns(ctx context.Context, cl *redistest.Cluster) int {
	total := 0
	for _, n := range cl.Nodes() {
		v, err := n.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub")
		if s, _ := v.(string); err == nil && strings.TrimSpace(s) != "" {
			total += strings.Count(strings.TrimSpace(s), "\n") + 1
		}
	}
	return total
}

// shardSubscribed checks that each lock's channel has one sharded
// subscriber on the master serving it.
func shardSubscribed(ctx context.Context, cl *redistest.Cluster, names []string) error {
	for _, n := range names {
		ch := layout.Prefixed(layout.LockChannelPrefix, n)
		m := cl.MasterFor(ch)
		v, err := m.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch)
		if err != nil {
			return err
		}
		if r, _ := v.([]any); len(r) != 2 || r[1] != int64(1) {
			return fmt.Errorf("SHARDNUMSUB %s on %s: %v", ch, m.Addr(), v)
		}
	}
	return nil
}

// eventually retries cond until it returns nil, failing t after d.
func eventually(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
