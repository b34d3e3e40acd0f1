package dlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

func ExampleFencedSet() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()
	m, err := locks.NewMutex("example:report", dlock.WithFencing())
	if err != nil {
		fmt.Println(err)
		return
	}

	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	fence := dlock.FenceOf(lockCtx) // the lock's token and holder
	// The write goes through only while no newer holder has written.
	err = dlock.FencedSet(ctx, rdb, fence, "example:report:data", "v1", 0)
	fmt.Println("written:", err == nil)
	_ = m.Unlock(lockCtx)

	// A former holder, paused past its lease, comes back with its old
	// token after a newer holder wrote: refused.
	newer, _ := m.Lock(ctx)
	_ = dlock.FencedSet(ctx, rdb, dlock.FenceOf(newer), "example:report:data", "v2", 0)
	_ = m.Unlock(newer)
	err = dlock.FencedSet(ctx, rdb, fence, "example:report:data", "stale", 0)
	fmt.Println("stale:", errors.Is(err, dlock.ErrStaleToken))

	rdb.Del(ctx, "example:report:data", dlock.FenceKey("example:report:data"), "redisson_lock_token:{example:report}")
	// Output:
	// written: true
	// stale: true
}

// The SQL check needs a database and its driver (any database/sql
// driver for PostgreSQL, for example github.com/jackc/pgx/v5/stdlib), so
// this example only shows the calls (it has no Output and is not run); fencetest/ runs them against a real
// PostgreSQL.
func ExampleCheckToken() {
	ctx := context.Background()
	var db *sql.DB                                             // sql.Open("pgx", "postgres://...")
	var m *dlock.Mutex                                         // locks.NewMutex("invoices", dlock.WithFencing())
	if err := (dlock.SQLFence{}).Create(ctx, db); err != nil { // once
		panic(err)
	}

	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Unlock(lockCtx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	// First in the transaction: refuses a token older than the newest
	// that wrote to "invoices" (or the same from another holder), and
	// holds newer ones back until commit.
	if err := dlock.CheckToken(ctx, tx, "invoices", dlock.FenceOf(lockCtx)); errors.Is(err, dlock.ErrStaleToken) {
		return // another holder took over: write nothing
	} else if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE invoices SET sent = true WHERE batch = $1", 42); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}
