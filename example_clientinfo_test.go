package dlock_test

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A label for the locks a process holds: dlock status NAME shows it, with
// the host, pid and program, as the holder of every lock the Client takes.
func ExampleWithClientName() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.WithClientName("billing worker 3"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	m, err := locks.NewMutex("example:invoices")
	if err != nil {
		fmt.Println(err)
		return
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Unlock(lockCtx)

	// What a tool reads: the owner field in the lock hash starts with the
	// Client's id, which names the Client's holder record. (The record is
	// written in the background at the first Lock; a tool that finds none
	// says the holder is unknown.)
	owner, _ := locks.Owner(lockCtx)
	fmt.Println(owner[:len(locks.ID())] == locks.ID())
	// Output: true
}
