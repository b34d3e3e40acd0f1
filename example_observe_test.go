package dlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// An Observer hears a Client's lock events: here it prints them. Module
// github.com/dlock-go/dlock/dlockotel turns them into OpenTelemetry
// metrics and spans.
func ExampleWithObserver() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.WithObserver(dlock.Observer{
		LockEnd: func(_ context.Context, l dlock.LockInfo, e dlock.LockEnd) {
			fmt.Printf("%s %s: %s (waited: %v)\n", l.Kind, l.Name, e.Outcome, e.Rounds > 0)
		},
		Unlocked: func(_ context.Context, l dlock.LockInfo, u dlock.UnlockInfo) {
			fmt.Printf("%s %s: released (held %v)\n", l.Kind, l.Name, u.Held >= 50*time.Millisecond)
		},
	}))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m, err := locks.NewMutex("example:observed")
	if err != nil {
		panic(err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := m.TryLock(ctx); err == nil {
		panic("TryLock got a held lock")
	}
	time.Sleep(50 * time.Millisecond) // the critical section
	if err := m.Unlock(lockCtx); err != nil {
		panic(err)
	}
	// Output:
	// mutex example:observed: acquired (waited: false)
	// mutex example:observed: busy (waited: false)
	// mutex example:observed: released (held true)
}
