package fencetest

// Tests of SQLFence.Create beside open Check transactions, and of two
// holders with the same token whose transactions overlap: the locking
// that the other tests, one transaction at a time, do not reach.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestCreateWhileCheckOpen: Create on a table that has the holder column
// returns at once while a Check transaction is open on it, and a Check
// on another resource in another transaction goes through meanwhile. An
// ALTER TABLE would wait for the open transaction, and new Checks behind
// it.
func TestCreateWhileCheckOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, fence := openDB(t)
	open, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback()
	if err := fence.Check(ctx, open, "report", dlock.Fence{Token: 1, Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	start := time.Now()
	if err := fence.Create(cctx, db); err != nil {
		t.Fatalf("Create while a Check transaction is open: %v (after %v)", err, time.Since(start))
	}
	t.Logf("Create returned after %v", time.Since(start))
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if err := fence.Check(cctx, other, "other", dlock.Fence{Token: 1, Holder: "b"}); err != nil {
		t.Fatalf("Check on another resource after Create: %v", err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := open.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestCreateAddsHolderBounded: on a table of an earlier dlock (no holder
// column) that an open transaction uses, Create gives up after its lock
// timeout with an error, instead of waiting for the transaction (and
// holding up every Check behind it); once the transaction is done it
// adds the column.
func TestCreateAddsHolderBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := pg.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fence := dlock.SQLFence{Table: fmt.Sprintf("fence_busy_%d", time.Now().UnixNano())}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+fence.Table+" (resource text PRIMARY KEY, token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE "+fence.Table) })
	open, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback()
	if _, err := open.ExecContext(ctx, "INSERT INTO "+fence.Table+" VALUES ('report', 3)"); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	start := time.Now()
	err = fence.Create(cctx, db)
	took := time.Since(start)
	t.Logf("Create beside the open transaction: %v after %v", err, took)
	switch {
	case err == nil:
		t.Fatal("Create added the column while a transaction held the table")
	case cctx.Err() != nil:
		t.Fatalf("Create waited for the open transaction until its ctx ended (%v): no lock timeout", took)
	}
	if err := open.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := fence.Create(ctx, db); err != nil {
		t.Fatalf("Create once the transaction was done: %v", err)
	}
	var holder string
	if err := db.QueryRowContext(ctx, "SELECT holder FROM "+fence.Table+" WHERE resource = 'report'").Scan(&holder); err != nil {
		t.Fatalf("the holder column after Create: %v", err)
	}
}

// TestCheckEqualTokenConcurrent: two holders with the same token (a
// split brain's second grant) whose transactions overlap. The second
// one's Check waits for the first one's transaction; it is refused with
// ErrStaleToken once the first commits, and goes through when the first
// rolls back. Both with and without an older row for the resource.
func TestCheckEqualTokenConcurrent(t *testing.T) {
	for _, c := range []struct {
		name     string
		prior    bool // the resource has a row with a lower token
		commit   bool // the first transaction commits
		wantErr  error
		wantLast string
	}{
		{"new row, commit", false, true, dlock.ErrStaleToken, "first"},
		{"new row, rollback", false, false, nil, "second"},
		{"older row, commit", true, true, dlock.ErrStaleToken, "first"},
		{"older row, rollback", true, false, nil, "second"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, fence := openDB(t)
			if c.prior {
				if err := write(ctx, db, fence, dlock.Fence{Token: 4, Holder: "old"}, "old"); err != nil {
					t.Fatal(err)
				}
			}
			first, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback()
			if err := fence.Check(ctx, first, "report", dlock.Fence{Token: 5, Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			if _, err := first.ExecContext(ctx, "INSERT INTO "+fence.Table+"_data VALUES (1, 'first') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v"); err != nil {
				t.Fatal(err)
			}
			second := make(chan error, 1)
			go func() { second <- write(ctx, db, fence, dlock.Fence{Token: 5, Holder: "b"}, "second") }()
			awaitLockWait(t, ctx, db, fence)
			select {
			case err := <-second:
				t.Fatalf("the second holder's Check did not wait for the first one's transaction: %v", err)
			default:
			}
			if c.commit {
				err = first.Commit()
			} else {
				err = first.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-second:
				if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Fatalf("the second holder after the first ended: %v, want %v", err, c.wantErr)
				}
			case <-ctx.Done():
				t.Fatal("the second holder's transaction still waits after the first one ended")
			}
			if v := value(t, db, fence); v != c.wantLast {
				t.Errorf("value %q, want %q", v, c.wantLast)
			}
		})
	}
}

// awaitLockWait waits until a session waits for a lock in a statement on
// fence's table, or fails the test when ctx ends first.
func awaitLockWait(t *testing.T, ctx context.Context, db *sql.DB, fence dlock.SQLFence) {
	t.Helper()
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || ' %'", fence.Table).Scan(&n)
		switch {
		case err != nil:
			t.Fatalf("waiting for a session to wait for a lock on %s: %v", fence.Table, err)
		case n > 0:
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no session waits for a lock on %s: %v", fence.Table, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestCreateKeepsCallersLockTimeout: the lock_timeout that Create sets
// for adding the holder column is its own. A caller who runs Create in
// its transaction after SET LOCAL lock_timeout reads its own value
// afterwards (its later statements keep their bound), and a session's
// lock_timeout is the same after Create as before, in a transaction
// and out of one.
func TestCreateKeepsCallersLockTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pg.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// legacy makes a fence table of an earlier dlock (no holder column),
	// so that Create takes the path that sets lock_timeout.
	legacy := func(suffix string) dlock.SQLFence {
		fence := dlock.SQLFence{Table: fmt.Sprintf("fence_lt%s_%d", suffix, time.Now().UnixNano())}
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+fence.Table+" (resource text PRIMARY KEY, token bigint NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE "+fence.Table) })
		return fence
	}
	show := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) string {
		t.Helper()
		var v string
		if err := q.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	hasHolder := func(fence dlock.SQLFence) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "SELECT holder FROM "+fence.Table); err != nil {
			t.Fatalf("Create did not add the holder column: %v", err)
		}
	}

	// A session value, then Create in a transaction with its own.
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = '5s'"); err != nil {
		t.Fatal(err)
	}
	fence := legacy("tx")
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '7s'"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Create(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if got := show(tx); got != "7s" {
		t.Errorf("lock_timeout in the caller's transaction after Create: %s, want the caller's 7s", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	hasHolder(fence)
	if got := show(conn); got != "5s" {
		t.Errorf("the session's lock_timeout after a transaction that ran Create: %s, want 5s", got)
	}

	// Create out of a transaction: each statement its own.
	fence = legacy("auto")
	if err := fence.Create(ctx, conn); err != nil {
		t.Fatal(err)
	}
	hasHolder(fence)
	if got := show(conn); got != "5s" {
		t.Errorf("the session's lock_timeout after Create: %s, want 5s", got)
	}
}
