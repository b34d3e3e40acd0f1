package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// At most 3 workers anywhere hold a permit; a worker that crashes gives
// its permit back when its lease runs out (the watchdog renews it while
// the worker lives).
func ExamplePermitSemaphore() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	slots, err := locks.NewPermitSemaphore("example:crawlers")
	if err != nil {
		panic(err)
	}
	defer slots.Delete(ctx)
	if _, err := slots.TrySetPermits(ctx, 3); err != nil {
		panic(err)
	}

	permitCtx, err := slots.Acquire(ctx) // waits for a free slot
	if err != nil {
		panic(err)
	}
	// Work under permitCtx: it is cancelled if the permit is lost.
	held, _ := slots.AcquiredPermits(ctx)
	fmt.Println("held:", held)
	if err := slots.Release(permitCtx); err != nil {
		panic(err)
	}
	fmt.Println("released:", context.Cause(permitCtx) == dlock.ErrUnlocked)
	// Output:
	// held: 1
	// released: true
}

// With a fixed lease a permit is not renewed: its context ends when the
// lease runs out, and the permit goes back to the pool.
func ExampleWithPermitLease() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()
	slots, err := locks.NewPermitSemaphore("example:leased", dlock.WithPermitLease(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slots.Delete(ctx)
	_, _ = slots.TrySetPermits(ctx, 1)

	permitCtx, err := slots.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	select {
	case <-permitCtx.Done(): // the lease ran out
	case <-ctx.Done():
	}
	fmt.Println("lost:", errors.Is(context.Cause(permitCtx), dlock.ErrLockLost))
	n, _ := slots.AvailablePermits(ctx) // reclaims the expired permit
	fmt.Println("available:", n)
	// Output:
	// lost: true
	// available: 1
}

// A permit without lease never expires, as Redisson's acquire() without a
// lease: only a release (by its holder, by id, or by a Java client) gives
// it back. Permits lists it without expiry.
func ExampleWithPermitLease_noLease() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	slots, err := locks.NewPermitSemaphore("example:exports", dlock.WithPermitLease(dlock.NoPermitLease))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slots.Delete(ctx)
	_, _ = slots.TrySetPermits(ctx, 1)
	permitCtx, err := slots.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	infos, _ := slots.Permits(ctx)
	fmt.Println("expires:", infos[0].Expires.IsZero())
	fmt.Println("released:", slots.Release(permitCtx) == nil)
	// Output:
	// expires: true
	// released: true
}

// A lease for one permit: this one expires after a second whatever the
// semaphore's lease.
func ExamplePermitSemaphore_AcquireWithLease() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	slots, err := locks.NewPermitSemaphore("example:uploads")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slots.Delete(ctx)
	_, _ = slots.TrySetPermits(ctx, 1)
	permitCtx, err := slots.AcquireWithLease(ctx, time.Second)
	if err != nil {
		panic(err)
	}
	<-permitCtx.Done() // the lease ran out
	fmt.Println(errors.Is(context.Cause(permitCtx), dlock.ErrLockLost))
	// Output:
	// true
}

// How long a permit has left, by its id, as Redisson's getLeaseTime.
func ExamplePermitSemaphore_LeaseTime() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	slots, err := locks.NewPermitSemaphore("example:reports")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slots.Delete(ctx)
	_, _ = slots.TrySetPermits(ctx, 2)
	leased, _ := slots.AcquireWithLease(ctx, time.Minute)
	forever, _ := slots.AcquireWithLease(ctx, dlock.NoPermitLease)
	for _, p := range []context.Context{leased, forever} {
		id, _ := slots.PermitID(p)
		left, _ := slots.LeaseTime(ctx, id)
		fmt.Println(left > 50*time.Second, left == dlock.NoPermitLease)
		_ = slots.Release(p)
	}
	// Output:
	// true false
	// false true
}

// TotalPermits counts the permits available and held (Redisson's
// getPermits); UpdateLeaseByID relets a permit by its id, whoever holds it
// (Redisson's updateLeaseTime).
func ExamplePermitSemaphore_UpdateLeaseByID() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	slots, err := locks.NewPermitSemaphore("example:exports")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slots.Delete(ctx)
	_, _ = slots.TrySetPermits(ctx, 3)
	p, _ := slots.AcquireWithLease(ctx, time.Minute)
	total, _ := slots.TotalPermits(ctx)
	available, _ := slots.AvailablePermits(ctx)
	fmt.Println(total, available)

	// Another process (an operator's tool, here a second Client) gives
	// the permit, known by its id, an hour.
	ops, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ops.Close()
	opsSlots, err := ops.NewPermitSemaphore("example:exports")
	if err != nil {
		fmt.Println(err)
		return
	}
	id, _ := slots.PermitID(p)
	if err := opsSlots.UpdateLeaseByID(ctx, id, time.Hour); err != nil {
		fmt.Println(err)
	}
	left, _ := opsSlots.LeaseTime(ctx, id)
	fmt.Println(left > 59*time.Minute)
	_ = slots.Release(p)
	// Output:
	// 3 2
	// true
}

// TryAcquireN takes several permits at once, or none (Redisson's
// tryAcquire(n)); ReleaseIDs gives them back together (release(list)).
func ExamplePermitSemaphore_TryAcquireN() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on every wait
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	gpus, err := locks.NewPermitSemaphore("example:gpus")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gpus.Delete(ctx)
	_, _ = gpus.TrySetPermits(ctx, 4)
	ids, err := gpus.TryAcquireN(ctx, 3, 10*time.Minute)
	fmt.Println(len(ids), err)
	_, err = gpus.TryAcquireN(ctx, 2, 10*time.Minute)
	fmt.Println(errors.Is(err, dlock.ErrNotObtained))
	fmt.Println(gpus.ReleaseIDs(ctx, ids))
	// Output:
	// 3 <nil>
	// true
	// <nil>
}
