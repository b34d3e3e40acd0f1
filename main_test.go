package dlock

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of the redis-server TestMain starts for the
// package's tests and examples.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	redisAddr = srv.Addr()
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "closing redis-server:", err)
	}
	if err := closeTopologies(); err != nil {
		fmt.Fprintln(os.Stderr, "closing the cluster and sentinel setups:", err)
	}
	if code == 0 {
		if err := redistest.CheckGoroutines(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return code
}

// newRedis returns a go-redis client for the test server, closed with t.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newClient returns a dlock Client on rdb (a new connection when nil),
// closed with t.
func newClient(t testing.TB, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	if rdb == nil {
		rdb = newRedis(t)
	}
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockName returns a name unique to the test and registers a check, run
// when the test ends, that nobody is still subscribed to its channel, and
// then deletes what the test left in Redis.
func lockName(t testing.TB) string {
	t.Helper()
	name := "test:" + strings.ReplaceAll(t.Name(), "/", ":")
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() {
		defer rdb.Close()
		ctx := context.Background()
		eventually(t, 5*time.Second, func() error {
			// Every kind's channels contain the name: the Mutex's, the
			// read-write lock's, the fair lock's per-waiter ones.
			left, err := rdb.PubSubChannels(ctx, "*"+name+"*").Result()
			if err != nil {
				return err
			}
			if len(left) != 0 {
				return fmt.Errorf("subscribers left on %v", left)
			}
			return nil
		})
		keys, _ := rdb.Keys(ctx, "*"+name+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	return name
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustLock locks m or fails the test.
func mustLock(t testing.TB, ctx context.Context, m interface {
	Lock(context.Context) (context.Context, error)
}) context.Context {
	t.Helper()
	lctx, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lctx
}

// mustMutex makes a Mutex or fails the test.
func mustMutex(t testing.TB, c *Client, name string, opts ...LockOption) *Mutex {
	t.Helper()
	m, err := c.NewMutex(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
