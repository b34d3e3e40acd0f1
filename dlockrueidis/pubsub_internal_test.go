package dlockrueidis

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// waitFor polls cond until it holds, failing t with what after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// After the hub's connection breaks, a Subscribe whose ctx has already
// ended must not leave the old channels unsubscribed: the reader opens the
// new connection and subscribes them again, with its own ctx.
func TestResubscribeSurvivesEndedSubscribe(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	var cn *conn
	hub := pubsub.New(func(context.Context) pubsub.Conn { cn = newConn(rc); return cn })
	defer hub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w, err := hub.Listen(ctx, "X")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Ready():
	case <-ctx.Done():
		t.Fatal("subscription of X never confirmed")
	}
	if err := admin.Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the reader dropping the killed connection", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.dc == nil
	})
	dead, stop := context.WithCancel(context.Background())
	stop()
	if _, err := hub.Subscribe(dead, "Y"); err == nil {
		t.Fatal("Subscribe with an ended ctx succeeded")
	}
	waitFor(t, 10*time.Second, "X subscribed again after the reconnect", func() bool {
		n, err := admin.PubSubNumSub(ctx, "X").Result()
		return err == nil && n["X"] == 1
	})
	if err := admin.Publish(ctx, "X", "after").Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	waitFor(t, 10*time.Second, "the message published on X after the reconnect", func() bool {
		msgs, _ := w.Messages()
		got = append(got, msgs...)
		return slices.Contains(got, "after")
	})
	w.Close(true)
}

// TestHubCloseLeavesAFrozenDial: on rueidis the hub's Close does not wait
// for a pub/sub connection being dialed to a server that does not answer
// (paused: TCP is accepted, the handshake is never answered, and rueidis
// keeps only its Dialer.Timeout there). conn dedicates the connection on a
// goroutine of its own, which Close abandons; the (S)SUBSCRIBEs only queue.
func TestHubCloseLeavesAFrozenDial(t *testing.T) {
	srv := redistest.NewServer(t)
	dialing := make(chan struct{}, 16)
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{srv.Addr()},
		DisableCache: true,
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			select {
			case dialing <- struct{}{}:
			default:
			}
			return d.DialContext(ctx, "tcp", addr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	<-dialing // the client's own connection
	hub := pubsub.New(func(context.Context) pubsub.Conn { return newConn(rc) })
	srv.Pause()
	t.Cleanup(srv.Resume)
	if _, err := hub.Subscribe(context.Background(), "frozen"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dialing: // the hub's reader dials its connection
	case <-time.After(10 * time.Second):
		t.Fatal("the hub did not dial its connection within 10s")
	}
	start := time.Now()
	if err := hub.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close took %v while a dial was pending", took.Round(time.Millisecond))
	}
}
