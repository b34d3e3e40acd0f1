package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// Owners as a Redisson (Java) client writes them: "<uuid>:<threadId>".
const (
	javaClient = "8c2f3b1e-7a44-4c59-9d6e-1f2a3b4c5d6e"
	javaOther  = "1d5e8f20-3b6a-4c1d-8e9f-0a1b2c3d4e5f"
)

// goldenLocks writes one lock of each kind and shape under prefix: a dlock
// Mutex held twice with fencing, and in Redisson's layout a Java RLock, a
// read-write lock in read mode (two readers) and in write mode (the writer
// also reading), a fair lock with two waiters, and a free lock whose
// fencing token stays. It returns when they are in place; the dlock lock
// is released when the test ends.
func goldenLocks(t *testing.T, prefix string) {
	t.Helper()
	ctx := t.Context()
	rdb := newRedis(t)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "*"+prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})

	locks, err := dlock.New(rdb, dlock.WithClientName("golden test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	m, err := locks.NewMutex(prefix+"go-mutex", dlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	// Tokens are at least the server's clock in µs; from a counter above
	// it they are the counter plus one, the same in every run.
	if err := rdb.Set(ctx, layout.Prefixed(layout.TokenPrefix, m.Name()), 9000000000000000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := m.Lock(outer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unlock(inner); _ = m.Unlock(outer) })
	awaitRecord(t, rdb, locks.ID()) // written in the background

	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Hour
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		java := prefix + "java-rlock"
		p.HSet(ctx, java, javaClient+":57", 1)
		p.PExpire(ctx, java, hour)

		read := prefix + "rw-read"
		p.HSet(ctx, read, "mode", "read", javaClient+":57", 2, javaOther+":12", 1)
		p.PExpire(ctx, read, hour)
		p.Set(ctx, layout.ReadHoldKey(read, javaClient+":57", 1), 1, hour)
		p.Set(ctx, layout.ReadHoldKey(read, javaClient+":57", 2), 1, 30*time.Minute)
		p.Set(ctx, layout.ReadHoldKey(read, javaOther+":12", 1), 1, 20*time.Minute)

		write := prefix + "rw-write"
		p.HSet(ctx, write, "mode", "write", javaClient+":9:write", 1, javaClient+":9", 1)
		p.PExpire(ctx, write, hour)
		p.Set(ctx, layout.ReadHoldKey(write, javaClient+":9", 1), 1, hour)

		fair := prefix + "fair"
		p.HSet(ctx, fair, javaClient+":3", 1)
		p.PExpire(ctx, fair, hour)
		p.RPush(ctx, layout.Prefixed(layout.QueuePrefix, fair), javaOther+":4", javaClient+":5")
		p.ZAdd(ctx, layout.Prefixed(layout.TimeoutPrefix, fair),
			redis.Z{Score: float64(now.Add(65 * time.Minute).UnixMilli()), Member: javaOther + ":4"},
			redis.Z{Score: float64(now.Add(70 * time.Minute).UnixMilli()), Member: javaClient + ":5"})

		free := prefix + "free"
		p.Set(ctx, layout.Prefixed(layout.TokenPrefix, free), 7, 0)

		p.HSet(ctx, prefix+"app-hash", "field", "value")
		p.Set(ctx, prefix+"app-string", "value", 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStatusGolden compares dlock status, as a table and as JSON, with
// testdata/*.golden for each kind of lock.
func TestStatusGolden(t *testing.T) {
	prefix := "golden:status:"
	goldenLocks(t, prefix)
	for _, name := range []string{"go-mutex", "java-rlock", "rw-read", "rw-write", "fair", "free", "never-used"} {
		t.Run(name, func(t *testing.T) {
			for _, format := range []string{"", "--json"} {
				args := []string{"status", prefix + name}
				file := "status_" + name
				if format != "" {
					args = append(args, format)
					file += ".json"
				}
				r := cliRun(t, args...)
				if r.code != 0 || r.stderr != "" {
					t.Fatalf("dlock %v: exit %d, stderr %q", args, r.code, r.stderr)
				}
				checkGolden(t, file, r.stdout)
			}
		})
	}
}

// TestStatusNotALock: status on a key that is not a lock exits 1 and says
// what the key is.
func TestStatusNotALock(t *testing.T) {
	prefix := "golden:notalock:"
	goldenLocks(t, prefix)
	for name, msg := range map[string]string{
		"app-hash":   `dlock: not a lock: "golden:notalock:app-hash" is a Redis hash whose fields are not lock owners`,
		"app-string": `dlock: not a lock: "golden:notalock:app-string" is a Redis string`,
	} {
		r := cliRun(t, "status", prefix+name)
		if r.code != exitFailure || !strings.HasPrefix(r.stderr, msg) {
			t.Errorf("status %s: exit %d, stderr %q; want %d, %q", name, r.code, r.stderr, exitFailure, msg)
		}
	}
}

// TestListGolden compares dlock list with a pattern, as a table and as
// JSON, with testdata/list*.golden: every lock, whoever wrote it, and no
// other key.
func TestListGolden(t *testing.T) {
	prefix := "golden:list:"
	goldenLocks(t, prefix)
	r := cliRun(t, "list", prefix+"*")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("list: exit %d, stderr %q", r.code, r.stderr)
	}
	checkGolden(t, "list", r.stdout)
	r = cliRun(t, "list", "--json", prefix+"*")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("list --json: exit %d, stderr %q", r.code, r.stderr)
	}
	checkGolden(t, "list.json", r.stdout)
	r = cliRun(t, "list", prefix+"nothing*")
	if r.code != 0 || r.stdout != `no locks match "`+prefix+`nothing*"`+"\n" {
		t.Errorf("list of nothing: exit %d, stdout %q", r.code, r.stdout)
	}
}

// awaitRecord waits until the holder record of the Client with id exists.
func awaitRecord(t testing.TB, rdb *redis.Client, id string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if rdb.Exists(context.Background(), layout.ClientRecordPrefix+id).Val() == 0 {
			return fmt.Errorf("no holder record for client %s", id)
		}
		return nil
	})
}

const zeroUUID = "00000000-0000-4000-8000-000000000000"

// Output that changes from run to run: dlock's client UUIDs, and times.
var (
	dlockUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`)
	textTime  = regexp.MustCompile(`\b[0-9][0-9hms.]*(ms|s)\b`)
	jsonTime  = regexp.MustCompile(`("(ttl_ms|deadline_ms|deadline_in_ms)": )[0-9]+`)
)

// Holder records: the host, pid and start time of the test process.
var (
	textPID     = regexp.MustCompile(`\bpid [0-9]+`)
	jsonPID     = regexp.MustCompile(`("pid": )[0-9]+`)
	startedTime = regexp.MustCompile(`[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z`)
	timePadding = regexp.MustCompile(`<t>  +`)
)

// normalise makes output comparable: the random UUID of the test's dlock
// Client becomes zeroUUID, of the same length so that columns stay
// aligned (the fixed Redisson ones stay), times become <t>, and the
// holder's host, pid and start time <host>, <pid> and <time> (they come
// last on their line).
func normalise(s string) string {
	if host, err := os.Hostname(); err == nil && host != "" {
		s = strings.ReplaceAll(s, " on "+host+",", " on <host>,")
		s = strings.ReplaceAll(s, `"host": "`+host+`"`, `"host": "<host>"`)
	}
	s = textPID.ReplaceAllString(s, "pid <pid>")
	s = jsonPID.ReplaceAllString(s, "${1}<pid>")
	s = startedTime.ReplaceAllString(s, "<time>")
	s = dlockUUID.ReplaceAllStringFunc(s, func(u string) string {
		if u == javaClient || u == javaOther {
			return u
		}
		return zeroUUID
	})
	s = jsonTime.ReplaceAllString(s, "${1}<t>")
	s = textTime.ReplaceAllString(s, "<t>")
	// A column after a time is padded to the width of the longest time
	// printed, which varies.
	return timePadding.ReplaceAllString(s, "<t>  ")
}

// checkGolden compares normalised output with testdata/<name>.golden, or
// rewrites the file with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden(t, name, normalise(got))
}

// golden compares got with testdata/<name>.golden, or rewrites the file
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
