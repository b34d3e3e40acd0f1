package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The lock and unlock scripts exactly as Redisson (RedissonLock,
// tryLockInnerAsync and unlockInnerAsync) sends them, as the seeds give them.
var (
	javaLock = redis.NewScript("if (redis.call('exists', KEYS[1]) == 0) then " +
		"redis.call('hset', KEYS[1], ARGV[2], 1); " +
		"redis.call('pexpire', KEYS[1], ARGV[1]); " +
		"return nil; " +
		"end; " +
		"if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " +
		"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
		"redis.call('pexpire', KEYS[1], ARGV[1]); " +
		"return nil; " +
		"end; " +
		"return redis.call('pttl', KEYS[1]);")
	javaUnlock = redis.NewScript("if (redis.call('exists', KEYS[1]) == 0) then " +
		"redis.call('publish', KEYS[2], ARGV[1]); " +
		"return 1; " +
		"end;" +
		"if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
		"return nil;" +
		"end; " +
		"local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
		"if (counter > 0) then " +
		"redis.call('pexpire', KEYS[1], ARGV[2]); " +
		"return 0; " +
		"else " +
		"redis.call('del', KEYS[1]); " +
		"redis.call('publish', KEYS[2], ARGV[1]); " +
		"return 1; " +
		"end; " +
		"return nil;")
)

// javaClient plays a Redisson client with thread id 1.
type javaClient struct {
	rdb   *redis.Client
	name  string
	owner string
}

func (j javaClient) lock(ctx context.Context) (acquired bool, pttl int64, err error) {
	pttl, err = javaLock.Run(ctx, j.rdb, []string{j.name}, 30000, j.owner).Int64()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	return false, pttl, err
}

func (j javaClient) unlock(ctx context.Context) error {
	return javaUnlock.Run(ctx, j.rdb, []string{j.name, "redisson_lock__channel:{" + j.name + "}"},
		0, 30000, j.owner).Err()
}

func TestRedissonInterop(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	java := javaClient{rdb: newRedis(t), name: name, owner: "5f0b1c2e-8d3a-4e8b-9a51-3c1d2e4f5a6b:1"}
	gc := newClient(t, nil)
	m := mustMutex(t, gc, name)

	// Java holds: Go can neither try nor wait its way in.
	if ok, _, err := java.lock(ctx); !ok || err != nil {
		t.Fatalf("java lock: %v %v", ok, err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Go TryLock while Java holds: %v", err)
	}
	// A Go waiter is woken by the Java unlock's message.
	got := make(chan time.Time, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		if ok, pttl, err := java.lock(ctx); ok || err != nil || pttl <= 0 {
			t.Errorf("Java lock while Go holds: acquired %v, pttl %d, %v", ok, pttl, err)
		}
		if n, _ := m.HoldCount(l); n != 1 {
			t.Errorf("Go hold count %d", n)
		}
		_ = m.Unlock(l)
	}()
	waitForWaiter(t, gc, name)
	unlocked := time.Now()
	if err := java.unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at, ok := <-got:
		if !ok {
			t.FailNow()
		}
		t.Logf("Go waiter acquired %v after the Java unlock", at.Sub(unlocked))
		if at.Sub(unlocked) > time.Second {
			t.Errorf("Go waiter woke %v after the Java unlock, not at once", at.Sub(unlocked))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Go waiter not woken by the Java unlock")
	}
	eventually(t, 5*time.Second, func() error {
		if ok, _, err := java.lock(ctx); !ok || err != nil {
			return errors.New("Java could not take the lock after Go released it")
		}
		return nil
	})
	if err := java.unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
