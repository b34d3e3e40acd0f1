package dlock

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestHandOverMinimalACL: under the documented minimal ACL (no
// +pubsub), a hot lock with several waiters in one Client hands over 4
// times, then the 5th release runs PUBSUB NUMSUB in the script. Unlock
// must not fail.
func TestHandOverMinimalACL(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	user := "dlock-acl-" + strings.ToLower(t.Name())
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, minimalACL...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()
	m := mustMutex(t, newClient(t, rdb), "app:"+lockName(t))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				l, err := m.Lock(ctx)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if err := m.Unlock(l); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i < 3 {
			t.Errorf("error %d of %d: %v", i+1, len(errs), err)
		}
	}
}
