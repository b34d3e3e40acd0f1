package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// recordOf reads the holder record of c: nil when there is none.
func recordOf(t testing.TB, rdb *redis.Client, c *Client) map[string]string {
	t.Helper()
	h, err := rdb.HGetAll(context.Background(), clientRecordPrefix+c.ID()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// awaitRecord waits until c's holder record exists and returns it.
func awaitRecord(t testing.TB, rdb *redis.Client, c *Client) map[string]string {
	t.Helper()
	var h map[string]string
	eventually(t, 5*time.Second, func() error {
		if h = recordOf(t, rdb, c); h == nil {
			return errors.New("no holder record yet")
		}
		return nil
	})
	return h
}

// settleRecord writes c's holder record now and waits for the answer, for
// tests that must know which command's reply a proxy loses: the record is
// otherwise written in the background at the first lock attempt.
func settleRecord(t testing.TB, c *Client) {
	t.Helper()
	c.record.touch()
	select {
	case <-c.record.wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("holder record not written within 10s")
	}
}

// TestClientRecordWrittenAtFirstLock: New writes nothing; the first lock
// attempt writes the record with the host, pid, program, label and start
// time, and a TTL of the watchdog timeout.
func TestClientRecordWrittenAtFirstLock(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	before := time.Now()
	c := newClient(t, rdb, WithClientName("billing worker"), WithWatchdogTimeout(20*time.Second))
	after := time.Now()
	m := mustMutex(t, c, lockName(t))
	if h := recordOf(t, rdb, c); h != nil {
		t.Fatalf("record written before any lock: %v", h)
	}
	l := mustLock(t, ctx, m)
	defer func() { _ = m.Unlock(l) }()
	h := awaitRecord(t, rdb, c)

	host, _ := os.Hostname()
	want := map[string]string{
		recordHost:    host,
		recordPID:     strconv.Itoa(os.Getpid()),
		recordProgram: filepath.Base(os.Args[0]),
		recordName:    "billing worker",
	}
	for f, v := range want {
		if h[f] != v {
			t.Errorf("record field %s = %q, want %q", f, h[f], v)
		}
	}
	started, err := time.Parse(time.RFC3339Nano, h[recordStarted])
	if err != nil {
		t.Fatalf("started %q: %v", h[recordStarted], err)
	}
	if started.Before(before.Truncate(time.Millisecond)) || started.After(after) {
		t.Errorf("started %v, want between %v and %v (when New ran)", started, before, after)
	}
	if len(h) != len(want)+1 {
		t.Errorf("record has fields %v, want only %v and started", h, want)
	}
	ttl, err := rdb.PTTL(ctx, clientRecordPrefix+c.ID()).Result()
	if err != nil || ttl <= 0 || ttl > 20*time.Second {
		t.Errorf("record TTL %v (%v), want in (0, 20s]", ttl, err)
	}
}

// TestClientRecordWithoutName: without WithClientName the record has no
// name field.
func TestClientRecordWithoutName(t *testing.T) {
	rdb := newRedis(t)
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	if _, err := m.TryLock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := awaitRecord(t, rdb, c); h[recordName] != "" || h[recordProgram] == "" {
		t.Errorf("record %v: want a program and no name", h)
	}
}

// TestClientRecordRefreshed: the record's TTL is set again every third of
// the watchdog timeout, and a record that was deleted (or expired) comes
// back, while the Client lives.
func TestClientRecordRefreshed(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	c := newClient(t, rdb, WithWatchdogTimeout(300*time.Millisecond))
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)
	awaitRecord(t, rdb, c)
	key := clientRecordPrefix + c.ID()

	if err := rdb.Persist(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		if d := rdb.PTTL(ctx, key).Val(); d <= 0 {
			return fmt.Errorf("record PTTL %v: not refreshed", d)
		}
		return nil
	})
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	awaitRecord(t, rdb, c)

	// Between locks too: a Lock may wait long before it gets the lock.
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	awaitRecord(t, rdb, c)
}

// TestClientRecordDeletedAtClose: Close deletes the record; a Client that
// never locked deletes nothing and sends nothing.
func TestClientRecordDeletedAtClose(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)
	awaitRecord(t, rdb, c)
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if h := recordOf(t, rdb, c); h != nil {
		t.Fatalf("record still there after Close: %v", h)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}

	idle := newClient(t, rdb)
	if idle.record.started.Load() {
		t.Fatal("a Client that never locked keeps a record")
	}
	if err := idle.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestClientRecordNoKeysPerLock: a Client holding many locks adds its
// record to Redis besides the locks themselves (and the seen set, one per
// database, shared by every Client), and the lock hashes hold only the
// owner fields Redisson expects.
func TestClientRecordNoKeysPerLock(t *testing.T) {
	ctx := context.Background()
	// A database of its own, so that DBSIZE counts this test's keys only.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DB: 7})
	t.Cleanup(func() { rdb.FlushDB(context.Background()); _ = rdb.Close() })
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, rdb)
	const n = 25
	var names []string
	for i := range n {
		name := lockName(t) + ":" + strconv.Itoa(i)
		names = append(names, name)
		m := mustMutex(t, c, name)
		l := mustLock(t, ctx, m)
		t.Cleanup(func() { _ = m.Unlock(l) })
	}
	awaitRecord(t, rdb, c)
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(names), clientRecordPrefix+c.ID(), layout.ClientSeenKey)
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys in Redis:\n%v\nwant the %d locks, the one record and the seen set:\n%v", keys, n, want)
	}
	for _, name := range names {
		h := rdb.HGetAll(ctx, name).Val()
		for f := range h {
			if !strings.HasPrefix(f, c.ID()+":") {
				t.Errorf("lock %s has field %q besides its owner", name, f)
			}
		}
		if len(h) != 1 {
			t.Errorf("lock %s has fields %v, want one owner", name, h)
		}
	}
}

// TestClientRecordRefusedByACL: a user whose ACL does not cover the record
// locks as before; the Client logs once that the record was not written.
// With ~dlock:client:* added, the record is written.
func TestClientRecordRefusedByACL(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	for _, withRecord := range []bool{false, true} {
		t.Run(fmt.Sprintf("record=%v", withRecord), func(t *testing.T) {
			user := "dlock-acl-record-" + strconv.FormatBool(withRecord)
			acl := slices.Clone(minimalACL)
			if withRecord {
				acl = append(acl, "~"+clientRecordPrefix+"*")
			}
			if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user, "reset"}, acl...)...).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
			defer rdb.Close()
			var logs syncBuf
			c := newClient(t, rdb, WithWatchdogTimeout(300*time.Millisecond),
				WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			m := mustMutex(t, c, "app:"+lockName(t))
			l := mustLock(t, ctx, m)
			if withRecord {
				awaitRecord(t, admin, c)
			} else {
				eventually(t, 5*time.Second, func() error {
					if !strings.Contains(logs.String(), "holder record not written") {
						return errors.New("refused record not logged yet")
					}
					return nil
				})
				if !strings.Contains(logs.String(), "NOPERM") {
					t.Errorf("log does not say why: %q", logs.String())
				}
			}
			if err := m.Unlock(l); err != nil {
				t.Fatalf("Unlock under the ACL: %v", err)
			}
		})
	}
}

// TestWithClientNameTooLong: a label longer than 256 bytes is refused.
func TestWithClientNameTooLong(t *testing.T) {
	if _, err := New(newRedis(t), WithClientName(strings.Repeat("x", maxClientName+1))); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("New: %v, want ErrInvalidOption", err)
	}
	if c, err := New(newRedis(t), WithClientName(strings.Repeat("x", maxClientName))); err != nil {
		t.Fatalf("New with a %d-byte name: %v", maxClientName, err)
	} else {
		_ = c.Close()
	}
}

// TestClientRecordOnCluster: on a cluster the record is written (one key,
// in its own slot) while the Client holds locks in other slots, and Close
// deletes it.
func TestClientRecordOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	rdb := newClusterRedis(t, sharedCluster(t), time.Second)
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ls []context.Context
	var ms []*Mutex
	for _, name := range []string{"{a}" + t.Name(), "{b}" + t.Name(), "{c}" + t.Name()} {
		m := mustMutex(t, c, name)
		ms = append(ms, m)
		ls = append(ls, mustLock(t, ctx, m))
	}
	key := clientRecordPrefix + c.ID()
	eventually(t, 5*time.Second, func() error {
		if h := rdb.HGetAll(ctx, key).Val(); h[recordPID] != strconv.Itoa(os.Getpid()) {
			return fmt.Errorf("record %v", h)
		}
		return nil
	})
	for i, m := range ms {
		if err := m.Unlock(ls[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Error("record left after Close")
	}
}

// TestClientRecordUnreachableNoACLHint: with Redis down (a port with no
// listener), the holder record cannot be written either; that is logged
// at debug level only, and nothing blames an ACL, which only a NOPERM
// reply would.
func TestClientRecordUnreachableNoACLHint(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var logs syncBuf
	c := newClient(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	m := mustMutex(t, c, "test:"+t.Name())
	if _, err := m.TryLock(t.Context()); err == nil {
		t.Fatal("TryLock on a closed port succeeded")
	}
	recv(t, c.record.wrote, 10*time.Second, "the holder record's first write")
	out := logs.String()
	if strings.Contains(out, "ACL") || strings.Contains(out, "~dlock:client:*") {
		t.Errorf("logs blame an ACL for a refused connection:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "holder record not written") && !strings.Contains(line, "level=DEBUG") {
			t.Errorf("holder record failure logged above debug level: %s", line)
		}
	}
	if !strings.Contains(out, "holder record not written: redis unreachable") {
		t.Errorf("no debug line for the record:\n%s", out)
	}
}
