package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A spin lock where pub/sub is the problem (a proxy that does not pass
// SUBSCRIBE, very many locks on a cluster): waiters poll with a backoff.
func ExampleSpinLock() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	l, err := locks.NewSpinLock("example:spin")
	if err != nil {
		panic(err)
	}
	held, err := l.Lock(ctx)
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		waiter, err := l.Lock(ctx) // another owner: backs off until the lock is free
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("the waiter has it")
		l.Unlock(waiter)
	}()
	// ... the critical section ...
	fmt.Println("first holder done")
	l.Unlock(held) // publishes nothing: the waiter finds the lock free at its next try
	<-done
	// Output:
	// first holder done
	// the waiter has it
}

// A constant backoff of 20 ms, as Redisson's ConstantBackOff.
func ExampleWithBackoff() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	l, err := locks.NewSpinLock("example:spin-constant", dlock.WithBackoff(20*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l.Name())
	// Output: example:spin-constant
}

// A non-reentrant Mutex refuses a second Lock by the owner that holds it,
// where a reentrant one would let it in.
func ExampleWithoutReentry() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	m, err := locks.NewMutex("example:non-reentrant", dlock.WithoutReentry())
	if err != nil {
		panic(err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Unlock(lockCtx)
	_, err = m.Lock(lockCtx) // the same owner again
	fmt.Println(errors.Is(err, dlock.ErrNotReentrant))
	// Output: true
}
