package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A coordinator waits until 3 workers, anywhere, report ready.
func ExampleCountDownLatch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ready, err := locks.NewCountDownLatch("example:workers-ready")
	if err != nil {
		panic(err)
	}
	if _, err := ready.TrySetCount(ctx, 3); err != nil {
		panic(err)
	}
	var workers sync.WaitGroup
	for range 3 {
		workers.Go(func() {
			// ... warm up ...
			if _, err := ready.CountDown(ctx); err != nil {
				fmt.Println(err)
			}
		})
	}
	if err := ready.Await(ctx); err != nil { // until the count reaches 0
		panic(err)
	}
	workers.Wait()
	n, _ := ready.Count(ctx)
	fmt.Println("all ready, count", n)
	// Output: all ready, count 0
}
