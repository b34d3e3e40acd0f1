package pubsub

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestIdleConnectionKept: a healthy connection on which nothing arrives
// is pinged, answers, and is kept. Watched for five health intervals,
// the hub keeps the one shard and the server the one pub/sub client (the
// same id), no reconnect is reported, and a message still arrives. A
// reader that forgot the answer to its ping, or did not ping, would take
// the silence for a frozen server and reopen the connection every few
// seconds, each time waking every waiter for a message it may have
// missed.
func TestIdleConnectionKept(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	var reconnects atomic.Int32
	h.OnReconnect = func(error) { reconnects.Add(1) }
	ctx := context.Background()
	w := subscribe(t, h, "ch")
	first := h.shard("")
	id := pubsubClient(t, rdb)
	const watch = 5 * healthInterval
	for start := time.Now(); time.Since(start) < watch; time.Sleep(100 * time.Millisecond) {
		if n := reconnects.Load(); n != 0 {
			t.Fatalf("the idle connection was reported broken %d times after %v", n, time.Since(start))
		}
		if h.shard("") != first {
			t.Fatalf("the idle connection was reopened after %v", time.Since(start))
		}
		if now := pubsubClient(t, rdb); now != id {
			t.Fatalf("the server's pub/sub client changed after %v: %s, was %s", time.Since(start), now, id)
		}
	}
	select {
	case <-w.Wake():
		t.Fatal("the waiter was woken while nothing was published")
	default:
	}
	if err := rdb.Publish(ctx, "ch", UnlockMessage).Err(); err != nil {
		t.Fatal(err)
	}
	if got := woken(5*time.Second, w); !got[0] {
		t.Fatal("the kept connection did not deliver a message")
	}
}

// pubsubClient returns the id of the server's one pub/sub client, and
// fails the test when it has none or several.
func pubsubClient(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	list, err := rdb.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d pub/sub clients on the server, want 1:\n%s", len(ids), list)
	}
	return ids[0]
}
