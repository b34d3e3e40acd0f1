package dlock

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// pathHook records, for each script a Lock or Unlock (or a semaphore's
// Acquire) sends, the dlock functions on the stack when go-redis gets it:
// the path of one call through the engine and the transport.
type pathHook struct{ last *[]string }

func (pathHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h pathHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record()
		return next(ctx, cmd)
	}
}

func (h pathHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record()
		return next(ctx, cmds)
	}
}

// record keeps the stack's dlock frames, innermost first, if a public
// Lock, Unlock or Acquire is on it (not the holder record's writes).
func (h pathHook) record() {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	var path []string
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/dlock-go/dlock") && !strings.HasSuffix(f.File, "_test.go") {
			path = append(path, strings.TrimPrefix(f.Function, "github.com/dlock-go/dlock"))
		}
		if !more {
			break
		}
	}
	if s := strings.Join(path, " "); strings.Contains(s, ").Lock") || strings.Contains(s, ").Unlock") || strings.Contains(s, ").Acquire") {
		*h.last = path
	}
}

// TestCallPath: one Lock of a free Mutex and its Unlock cross at most 6
// dlock functions between the public method and go-redis (Lock → acquire
// → attempt → send → the kind's script → transport Run → batcher), so
// that the path reads top-down; a layer added in between fails this test.
func TestCallPath(t *testing.T) {
	var path []string
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	rdb.AddHook(pathHook{&path})
	t.Cleanup(func() { _ = rdb.Close() })
	m := mustMutex(t, newClient(t, rdb), lockName(t))
	ctx := context.Background()
	l := mustLock(t, ctx, m)
	lockPath := path
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call string
		path []string
	}{{"Lock", lockPath}, {"Unlock", path}} {
		between := len(c.path) - 1 // the public method itself is not between
		t.Logf("%s: %d dlock frames between it and go-redis:\n  %s", c.call, between, strings.Join(c.path, "\n  "))
		if len(c.path) == 0 || !strings.HasSuffix(c.path[len(c.path)-1], ")."+c.call) {
			t.Fatalf("%s: no script sent from %s seen: %v", c.call, c.call, c.path)
		}
		if between > 6 {
			t.Errorf("%s: %d dlock frames between it and go-redis, want at most 6", c.call, between)
		}
	}
}

// TestCallPathSynchronizers: a PermitSemaphore's Acquire and a
// Semaphore's Acquire go through the one acquire loop (acquire.go) that
// Lock goes through; a permit's path is a Lock's (Acquire → acquire →
// attempt → send → the kind's script → transport Run → batcher), at most 6
// dlock functions between Acquire and go-redis.
func TestCallPathSynchronizers(t *testing.T) {
	var path []string
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	rdb.AddHook(pathHook{&path})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	ctx := context.Background()
	ps, err := c.NewPermitSemaphore(lockName(t) + "-permits")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	path = nil
	p, err := ps.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	permitPath := path
	if err := ps.Release(p); err != nil {
		t.Fatal(err)
	}
	sem, err := c.NewSemaphore(lockName(t) + "-sem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	path = nil
	if err := sem.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call  string
		path  []string
		bound int // 0: not bounded
	}{{"PermitSemaphore).Acquire", permitPath, 6}, {"Semaphore).Acquire", path, 0}} {
		between := len(c.path) - 1
		t.Logf("%s: %d dlock frames between it and go-redis:\n  %s", c.call, between, strings.Join(c.path, "\n  "))
		if len(c.path) == 0 || !strings.HasSuffix(c.path[len(c.path)-1], c.call) {
			t.Fatalf("%s: no script sent from it seen: %v", c.call, c.path)
		}
		if !slices.Contains(c.path, ".acquire") {
			t.Errorf("%s: not through the acquire loop (acquire.go): %v", c.call, c.path)
		}
		if c.bound > 0 && between > c.bound {
			t.Errorf("%s: %d dlock frames between it and go-redis, want at most %d", c.call, between, c.bound)
		}
	}
}
