package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// awaitDone waits until ctx ends, failing the test if it does not within
// timeout.
func awaitDone(t testing.TB, ctx context.Context, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
}
