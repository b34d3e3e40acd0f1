package dlock_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func ExampleDo() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	m, err := locks.NewMutex("example:do")
	if err != nil {
		log.Fatal(err)
	}

	// Do locks, runs the function, and unlocks; the error is the
	// function's, joined with Unlock's.
	err = dlock.Do(ctx, m, func(lockCtx context.Context) error {
		fmt.Println("rotating the logs")
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// rotating the logs
	// error: <nil>
}

func ExampleNewSyncLocker() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	m, err := locks.NewMutex("example:sync-locker")
	if err != nil {
		log.Fatal(err)
	}

	// A sync.Locker for code that wants one. Lock blocks until it holds
	// the lock; what it cannot return goes to the function given here.
	var l sync.Locker = dlock.NewSyncLocker(m, func(err error) { log.Print(err) })
	total := 0
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Lock()
			defer l.Unlock()
			total++
		}()
	}
	wg.Wait()
	fmt.Println("total:", total)
	// Output: total: 3
}
