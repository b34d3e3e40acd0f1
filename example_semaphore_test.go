package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// At most 2 of 5 jobs run at once across every process that shares the
// semaphore.
func ExampleSemaphore() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	sem, err := locks.NewSemaphore("example:exports")
	if err != nil {
		panic(err)
	}
	defer sem.Delete(ctx)
	// The first process to start sets the permits; later ones find them set.
	if _, err := sem.TrySetPermits(ctx, 2); err != nil {
		panic(err)
	}

	var wg sync.WaitGroup
	for job := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sem.Acquire(ctx, 1); err != nil { // waits for a permit
				fmt.Println(job, err)
				return
			}
			defer sem.Release(ctx, 1)
			// ... run the export ...
		}()
	}
	wg.Wait()
	n, _ := sem.AvailablePermits(ctx)
	fmt.Println("available:", n)
	// Output: available: 2
}

func ExampleSemaphore_TryAcquire() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()
	sem, err := locks.NewSemaphore("example:slots")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sem.Delete(ctx)

	_ = sem.AddPermits(ctx, 3)
	ok, _ := sem.TryAcquire(ctx, 2)
	fmt.Println("took 2:", ok)
	ok, _ = sem.TryAcquire(ctx, 2)
	fmt.Println("took 2 more:", ok)
	drained, _ := sem.DrainPermits(ctx)
	fmt.Println("drained:", drained)
	// Output:
	// took 2: true
	// took 2 more: false
	// drained: 1
}

// Permits for a batch window: the semaphore goes away by itself an hour
// after it was set up, and a late Release does not bring it back.
func ExampleSemaphore_TrySetPermitsWithTTL() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	sem, err := locks.NewSemaphore("example:window")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sem.Delete(ctx)
	set, err := sem.TrySetPermitsWithTTL(ctx, 3, time.Hour)
	fmt.Println(set, err)
	ttl, _ := sem.TTL(ctx)
	fmt.Println(ttl > 59*time.Minute)
	if ok, _ := sem.TryAcquire(ctx, 1); ok {
		// ... work ...
		released, _ := sem.ReleaseIfExists(ctx, 1) // false once the window closed
		fmt.Println(released)
	}
	// Output:
	// true <nil>
	// true
	// true
}

func ExampleSemaphore_ReleaseIfExists() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	sem, err := locks.NewSemaphore("example:gone")
	if err != nil {
		fmt.Println(err)
		return
	}
	sem.Delete(ctx)
	ok, err := sem.ReleaseIfExists(ctx, 1) // not created again
	n, _ := sem.AvailablePermits(ctx)
	fmt.Println(ok, err, n)
	// Output: false <nil> 0
}

func ExampleSemaphore_Expire() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	sem, err := locks.NewSemaphore("example:expire")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sem.Delete(ctx)
	sem.TrySetPermits(ctx, 1)
	ok, _ := sem.Expire(ctx, time.Minute)
	ttl, _ := sem.TTL(ctx)
	fmt.Println(ok, ttl > 0)
	cleared, _ := sem.ClearExpire(ctx)
	ttl, _ = sem.TTL(ctx)
	fmt.Println(cleared, ttl)
	// Output:
	// true true
	// true 0s
}
