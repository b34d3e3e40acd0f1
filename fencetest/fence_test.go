package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	pg        *Postgres
	redisAddr string
)

func TestMain(m *testing.M) {
	if os.Getenv(orphanEnv) != "" {
		os.Exit(startAndHang())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if pg, err = StartPostgres(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Close()
	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	redisAddr = srv.Addr()
	return m.Run()
}

// openDB returns a handle on the test server with a fresh fence table
// (and a table of data the fence protects), both dropped with t.
func openDB(t testing.TB) (*sql.DB, dlock.SQLFence) {
	t.Helper()
	db, err := pg.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	fence := dlock.SQLFence{Table: fmt.Sprintf("fence_%d", time.Now().UnixNano())}
	if err := fence.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := fence.Create(ctx, db); err != nil { // if not exists
		t.Fatalf("Create again: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+fence.Table+"_data (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.ExecContext(context.Background(), "DROP TABLE "+fence.Table+", "+fence.Table+"_data")
	})
	return db, fence
}

// write is one holder's transaction: the fence check, then its write of
// v. It returns the check's error (the transaction rolled back) or the
// commit's.
func write(ctx context.Context, db *sql.DB, fence dlock.SQLFence, f dlock.Fence, v string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fence.Check(ctx, tx, "report", f); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+fence.Table+"_data VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", v); err != nil {
		return err
	}
	return tx.Commit()
}

func value(t *testing.T, db *sql.DB, fence dlock.SQLFence) string {
	t.Helper()
	var v string
	if err := db.QueryRowContext(context.Background(), "SELECT v FROM "+fence.Table+"_data WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCheckTokenRejectsStale: PostgreSQL refuses a transaction whose token
// is below the newest that wrote, and nothing of it is written.
func TestCheckTokenRejectsStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, fence := openDB(t)
	for _, w := range []struct {
		token int64
		v     string
		stale bool
	}{
		{10, "a", false},
		{10, "b", false}, // the same holder again
		{9, "stale", true},
		{11, "c", false},
		{10, "stale", true},
	} {
		err := write(ctx, db, fence, dlock.Fence{Token: w.token, Holder: "a"}, w.v)
		if w.stale != errors.Is(err, dlock.ErrStaleToken) || (!w.stale && err != nil) {
			t.Errorf("token %d: %v, want stale %v", w.token, err, w.stale)
		}
	}
	if v := value(t, db, fence); v != "c" {
		t.Errorf("value %q, want c (the stale writes rolled back)", v)
	}
}

// TestCheckTokenEqualToken: PostgreSQL lets an equal token through only
// from the holder that wrote it last. In a split brain two masters that
// grant in the same microsecond hand out the same token to two holders:
// the second one's transaction is refused, the first one's next ones are
// not.
func TestCheckTokenEqualToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, fence := openDB(t)
	for i, w := range []struct {
		f     dlock.Fence
		stale bool
	}{
		{dlock.Fence{Token: 10, Holder: "a"}, false},
		{dlock.Fence{Token: 10, Holder: "a"}, false}, // the same holder again
		{dlock.Fence{Token: 10, Holder: "b"}, true},  // the same token granted to another
		{dlock.Fence{Token: 10, Holder: "a"}, false},
		{dlock.Fence{Token: 11, Holder: "b"}, false},
		{dlock.Fence{Token: 11, Holder: "a"}, true},
		{dlock.Fence{Token: 11, Holder: "b"}, false},
	} {
		err := write(ctx, db, fence, w.f, fmt.Sprint(i))
		if w.stale != errors.Is(err, dlock.ErrStaleToken) || (!w.stale && err != nil) {
			t.Errorf("write %d %+v: %v, want stale %v", i, w.f, err, w.stale)
		}
	}
	if v := value(t, db, fence); v != "6" {
		t.Errorf("value %q, want 6 (the other holders' equal tokens rolled back)", v)
	}
}

// TestCreateAddsHolder: Create adds the holder column to a fence table
// made by an earlier dlock (resource and token only); its rows keep their
// tokens, with an empty holder that no writer has, so an equal token is
// refused and a higher one goes through.
func TestCreateAddsHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := pg.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fence := dlock.SQLFence{Table: fmt.Sprintf("fence_old_%d", time.Now().UnixNano())}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+fence.Table+" (resource text PRIMARY KEY, token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE "+fence.Table+", "+fence.Table+"_data") })
	if _, err := db.ExecContext(ctx, "INSERT INTO "+fence.Table+" VALUES ('report', 20); CREATE TABLE "+fence.Table+"_data (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, db, fence, dlock.Fence{Token: 20, Holder: "a"}, "equal"); !errors.Is(err, dlock.ErrStaleToken) {
		t.Errorf("equal token over a row without holder: %v, want ErrStaleToken", err)
	}
	if err := write(ctx, db, fence, dlock.Fence{Token: 21, Holder: "a"}, "higher"); err != nil {
		t.Errorf("higher token over a row without holder: %v", err)
	}
}

// TestCheckTokenOrdersHolders: the check holds the resource's row until
// its transaction ends. A newer holder's check waits for an older
// holder's open transaction and then goes through; once the newer one has
// committed, the older one's check fails.
func TestCheckTokenOrdersHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, fence := openDB(t)

	old, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	if err := fence.Check(ctx, old, "report", dlock.Fence{Token: 5, Holder: "old"}); err != nil {
		t.Fatal(err)
	}
	newer := make(chan error, 1)
	go func() { newer <- write(ctx, db, fence, dlock.Fence{Token: 6, Holder: "newer"}, "newer") }()
	select {
	case err := <-newer:
		t.Fatalf("the newer holder's transaction did not wait for the older one's: %v", err)
	case <-time.After(300 * time.Millisecond): // blocked on the row, as it must be
	}
	if _, err := old.ExecContext(ctx, "INSERT INTO "+fence.Table+"_data VALUES (1, 'old')"); err != nil {
		t.Fatal(err)
	}
	if err := old.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-newer:
		if err != nil {
			t.Fatalf("the newer holder after the older committed: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the newer holder's transaction still waits after the older one committed")
	}
	if err := write(ctx, db, fence, dlock.Fence{Token: 5, Holder: "old"}, "late"); !errors.Is(err, dlock.ErrStaleToken) {
		t.Errorf("the older holder again after the newer committed: %v, want ErrStaleToken", err)
	}
	if v := value(t, db, fence); v != "newer" {
		t.Errorf("value %q, want newer", v)
	}
}

// TestPausedHolderRejectedByPostgres is the founding articles' third
// experiment end to end: a holder whose work outlasts its lease loses a
// dlock Mutex to another client, which writes through PostgreSQL; the
// first holder wakes up and writes with its token: refused.
func TestPausedHolderRejectedByPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, fence := openDB(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	name := "fencetest:" + t.Name()
	slow, _ := locks.NewMutex(name, dlock.WithFencing(), dlock.WithLease(200*time.Millisecond))
	fast, _ := locks.NewMutex(name, dlock.WithFencing())

	l1, err := slow.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f1 := dlock.FenceOf(l1)
	select { // the slow holder's work outlasts its lease
	case <-l1.Done():
	case <-ctx.Done():
		t.Fatal("the 200ms lease never ran out")
	}
	l2, err := fast.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f2 := dlock.FenceOf(l2)
	if err := write(ctx, db, fence, f2, "fast"); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	if err := fast.Unlock(l2); err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, db, fence, f1, "slow"); !errors.Is(err, dlock.ErrStaleToken) {
		t.Errorf("the paused holder's write (token %d after %d): %v, want ErrStaleToken", f1.Token, f2.Token, err)
	}
	if v := value(t, db, fence); v != "fast" {
		t.Errorf("value %q, want the new holder's", v)
	}
	rdb.Del(context.Background(), "redisson_lock_token:{"+name+"}")
}

// plainWrite is write without the fence check.
func plainWrite(ctx context.Context, db *sql.DB, fence dlock.SQLFence, v string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+fence.Table+"_data VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", v); err != nil {
		return err
	}
	return tx.Commit()
}
