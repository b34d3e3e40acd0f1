package dlockrueidis_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// redisAddr is the redis-server that TestMain starts for the tests and
// examples.
var redisAddr string

func TestMain(m *testing.M) { os.Exit(run(m)) }

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
	return code
}

// newRueidis returns a rueidis client of the test server, closed with t.
func newRueidis(t testing.TB) rueidis.Client {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// newRedis returns a go-redis client of the test server, closed with t.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newClient returns a dlock Client on a new rueidis client, closed with t.
func newClient(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlockrueidis.New(newRueidis(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newGoRedisClient returns a dlock Client on go-redis, closed with t.
func newGoRedisClient(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(newRedis(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// boundedCtx is a context that ends the test's waits, with a message.
func boundedCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// awaitDone waits for done, failing t with what after d.
func awaitDone(t testing.TB, done <-chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: not done after %v", what, d)
	}
}
