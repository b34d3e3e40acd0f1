package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Two services take the same two locks in opposite orders: each holds one
// and waits for the other's. With WithDeadlockDetection their waits are
// recorded, and the youngest waiter of the cycle gives up with
// ErrDeadlock, so that the other can go on.
func ExampleWithDeadlockDetection() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	newClient := func() *dlock.Client {
		c, err := dlock.New(rdb, dlock.WithDeadlockDetection(50*time.Millisecond))
		if err != nil {
			panic(err)
		}
		return c
	}
	billing, shipping := newClient(), newClient()
	defer billing.Close()
	defer shipping.Close()
	ordersB, err := billing.NewMutex("example:orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	stockB, err := billing.NewMutex("example:stock")
	if err != nil {
		fmt.Println(err)
		return
	}
	ordersS, err := shipping.NewMutex("example:orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	stockS, err := shipping.NewMutex("example:stock")
	if err != nil {
		fmt.Println(err)
		return
	}

	heldB, _ := ordersB.Lock(ctx) // billing: orders, then stock
	heldS, _ := stockS.Lock(ctx)  // shipping: stock, then orders
	type result struct {
		who string
		err error
	}
	results := make(chan result, 2)
	take := func(who string, m *dlock.Mutex, held context.Context) {
		lockCtx, err := m.Lock(held)
		if err == nil {
			_ = m.Unlock(lockCtx)
		}
		results <- result{who, err}
	}
	go take("billing", stockB, heldB)
	go take("shipping", ordersS, heldS)

	first := <-results // the youngest waiter backs off...
	fmt.Println("one gave up:", errors.Is(first.err, dlock.ErrDeadlock))
	if first.who == "billing" { // ...and releases what it holds
		_ = ordersB.Unlock(heldB)
	} else {
		_ = stockS.Unlock(heldS)
	}
	second := <-results
	fmt.Println("the other got its lock:", second.err == nil)
	if second.who == "billing" {
		_ = ordersB.Unlock(heldB)
	} else {
		_ = stockS.Unlock(heldS)
	}
	// Output:
	// one gave up: true
	// the other got its lock: true
}
