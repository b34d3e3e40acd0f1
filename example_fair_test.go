package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func ExampleFairMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m, err := locks.NewFairMutex("example:printer")
	if err != nil {
		panic(err)
	}
	held, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Three jobs ask for the lock one after the other; they get it in that
	// order, whatever process or Client they run in.
	order := make(chan string, 3)
	var wg sync.WaitGroup
	for i, job := range []string{"first", "second", "third"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				panic(err)
			}
			order <- job // while holding the lock
			_ = m.Unlock(lockCtx)
		}()
		waitQueued(ctx, rdb, "example:printer", int64(i+1)) // for the example's sake: one at a time
	}
	_ = m.Unlock(held)
	wg.Wait()
	close(order)
	for job := range order {
		fmt.Println(job)
	}
	// Output:
	// first
	// second
	// third
}

// waitQueued waits until n waiters are in the fair lock's queue,
// Redisson's list redisson_lock_queue:{name}.
func waitQueued(ctx context.Context, rdb *redis.Client, name string, n int64) {
	queue := "redisson_lock_queue:{" + name + "}"
	for rdb.LLen(ctx, queue).Val() < n {
		time.Sleep(time.Millisecond)
	}
}

func ExampleWithFairWaitTimeout() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	// A waiter whose process dies holds the queue up for at most 10 s
	// after the lock is freed, instead of the default 5 min.
	m, err := locks.NewFairMutex("example:batch", dlock.WithFairWaitTimeout(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	lockCtx, _ := m.Lock(ctx)
	fmt.Println("running the batch")
	_ = m.Unlock(lockCtx)
	// Output: running the batch
}
