package dlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func ExampleRWMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	rw, err := locks.NewRWMutex("example:config")
	if err != nil {
		panic(err)
	}
	// Two readers (two owners: unrelated contexts) hold the lock at once.
	r1, _ := rw.ReadLock().Lock(ctx)
	r2, err := rw.ReadLock().TryLock(ctx)
	fmt.Println("second reader:", err == nil)
	// A writer has to wait for both.
	_, err = rw.WriteLock().TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, dlock.ErrNotObtained))
	_ = rw.ReadLock().Unlock(r1)
	_ = rw.ReadLock().Unlock(r2)

	w, err := rw.WriteLock().Lock(ctx)
	fmt.Println("writer after the readers:", err == nil)
	_ = rw.WriteLock().Unlock(w)
	// Output:
	// second reader: true
	// writer while reading: true
	// writer after the readers: true
}

func ExampleRWMutex_downgrade() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()
	rw, err := locks.NewRWMutex("example:cache")
	if err != nil {
		fmt.Println(err)
		return
	}

	// Write the cache, then keep reading it without letting another
	// writer in between: take the read lock with the write lock context,
	// then release the write lock.
	w, _ := rw.WriteLock().Lock(ctx)
	r, err := rw.ReadLock().Lock(w)
	fmt.Println("read lock under the write lock:", err == nil)
	_ = rw.WriteLock().Unlock(w)
	_, err = rw.WriteLock().TryLock(ctx)
	fmt.Println("another writer:", errors.Is(err, dlock.ErrNotObtained))
	other, err := rw.ReadLock().TryLock(ctx)
	fmt.Println("another reader:", err == nil)
	_ = rw.ReadLock().Unlock(other)

	// The other way round would wait for itself: it fails at once.
	_, err = rw.WriteLock().Lock(r)
	fmt.Println("upgrade:", errors.Is(err, dlock.ErrUpgrade))
	_ = rw.ReadLock().Unlock(r)
	// Output:
	// read lock under the write lock: true
	// another writer: true
	// another reader: true
	// upgrade: true
}
