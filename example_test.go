package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// redisAddr is where the examples find Redis: the redis-server the
// package's TestMain starts.
func redisAddr() string { return dlock.RedisAddr() }

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m, err := locks.NewMutex("example:nightly-report")
	if err != nil {
		panic(err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Only one process runs this at a time. lockCtx is cancelled if the
	// lock is lost, so long work should watch it.
	fmt.Println("running the nightly report")
	if err := m.Unlock(lockCtx); err != nil {
		panic(err)
	}
	// Output: running the nightly report
}

func ExampleMutex_Lock_reentrant() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	m, _ := locks.NewMutex("example:account:42")

	outer, _ := m.Lock(ctx)
	inner, _ := m.Lock(outer) // the lock context re-enters
	n, _ := m.HoldCount(inner)
	fmt.Println("holds:", n)
	_ = m.Unlock(inner)
	_ = m.Unlock(outer)
	locked, _ := m.IsLocked(ctx)
	fmt.Println("locked:", locked)
	// Output:
	// holds: 2
	// locked: false
}

func ExampleMutex_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	m, _ := locks.NewMutex("example:singleton-job")

	held, _ := m.Lock(ctx)
	// Another goroutine (another owner) tries without waiting.
	_, err := m.TryLock(ctx)
	fmt.Println(errors.Is(err, dlock.ErrNotObtained))
	_ = m.Unlock(held)
	// Output: true
}

func ExampleWithLease() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	m, _ := locks.NewMutex("example:lease", dlock.WithLease(50*time.Millisecond))

	lockCtx, _ := m.Lock(ctx)
	select {
	case <-lockCtx.Done(): // nobody renews a fixed lease
		fmt.Println(errors.Is(context.Cause(lockCtx), dlock.ErrLockLost))
	case <-time.After(10 * time.Second):
		fmt.Println("the lock outlived its 50ms lease by 10s")
	}
	// Output: true
}

func ExampleToken() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	m, _ := locks.NewMutex("example:fenced", dlock.WithFencing())

	first, _ := m.Lock(ctx)
	t1, _ := dlock.Token(first)
	_ = m.Unlock(first)
	second, _ := m.Lock(ctx)
	t2, _ := dlock.Token(second)
	_ = m.Unlock(second)
	// A storage service accepts a write only with a token at least as high
	// as any it has seen.
	fmt.Println(t2 > t1)
	rdb.Del(ctx, "redisson_lock_token:{example:fenced}")
	// Output: true
}
