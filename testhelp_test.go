package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialGate refuses new connections of the go-redis clients that dial
// through it while it is shut, as a server that is down would.
// While hold is open (non-nil and not closed), a refused dial waits for
// it, so that a test sees the state before the refusal lands.
type dialGate struct {
	shut atomic.Bool
	hold chan struct{} // set before shut
}

func (g *dialGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.shut.Load() {
		if g.hold != nil {
			select {
			case <-g.hold:
			case <-ctx.Done():
			}
		}
		return nil, errors.New("dial gate shut: connection refused")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// gatedClient returns a Client on the test server whose connections are
// dialled through g.
func gatedClient(t testing.TB, g *dialGate, opts ...Option) *Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: g.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	return newClient(t, rdb, opts...)
}

// missNotice makes the waiters of c, subscribed to channel, miss the
// message that release publishes: it kills their subscription connection
// and keeps it from reconnecting (g) until release has run, so that the
// message reaches nobody. Only the resubscription's wake-up
// (internal/pubsub) can then tell the waiters; without it they sleep until
// the holder's lease runs out.
func missNotice(t *testing.T, c *Client, g *dialGate, channel string, release func() error) {
	t.Helper()
	ctx := t.Context()
	g.shut.Store(true)
	defer g.shut.Store(false)
	if err := c.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		n, err := c.rdb.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			return err
		}
		if n[channel] != 0 {
			return fmt.Errorf("%d subscribers on %s", n[channel], channel)
		}
		return nil
	})
	if err := release(); err != nil {
		t.Fatal(err)
	}
}

// recv receives a value from ch, failing the test if none comes within
// timeout: a test waits for nothing without a bound.
func recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("%s: nothing within %v", what, timeout)
		var zero T
		return zero
	}
}

// awaitDone waits until ctx ends, failing the test if it does not within
// timeout.
func awaitDone(t testing.TB, ctx context.Context, timeout time.Duration, what string) {
	t.Helper()
	recv(t, ctx.Done(), timeout, what)
}

// awaitGroup waits for wg, failing the test if its goroutines have not
// all finished within timeout: a test waits for nothing without a bound.
// (Goroutines still running then end when the test's Clients are closed.)
func awaitGroup(t testing.TB, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	recv(t, done, timeout, what)
}

// boundedCtx returns a context that ends after d (or at the test's
// cleanup): a wait on it that does not end fails the test with ctx's error
// instead of hanging until go test's timeout.
func boundedCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exists reports whether key exists, failing the test on a Redis error
// rather than reading it as "no".
func exists(t testing.TB, rdb redis.Cmdable, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// pttl returns key's PTTL, failing the test on a Redis error.
func pttl(t testing.TB, rdb redis.Cmdable, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return d
}
