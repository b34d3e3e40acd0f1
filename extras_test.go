package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestExtend: Extend moves a fixed lease and the lock context's deadline;
// it refuses a watched hold and reports a lost one.
func TestExtend(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	m := mustMutex(t, c, lockName(t), WithLease(300*time.Millisecond))
	l := mustLock(t, ctx, m)
	if err := m.Extend(l, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := m.TTL(ctx); err != nil || d < 4*time.Second {
		t.Fatalf("TTL after Extend = %v, %v; want about 5s", d, err)
	}
	select { // past the first lease: still held
	case <-l.Done():
		t.Fatalf("lock context ended after Extend: %v", context.Cause(l))
	case <-time.After(600 * time.Millisecond):
	}
	if err := m.Extend(l, 0); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Extend(0): %v, want ErrInvalidOption", err)
	}
	if _, err := m.ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Extend(l, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend of a deleted lock: %v, want ErrNotHeld", err)
	}
	if !errors.Is(context.Cause(l), ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", context.Cause(l))
	}

	watched := mustMutex(t, c, lockName(t)+":watched")
	w := mustLock(t, ctx, watched)
	if err := watched.Extend(w, time.Second); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Extend of a watched hold: %v, want ErrInvalidOption", err)
	}
	if err := watched.Unlock(w); err != nil {
		t.Fatal(err)
	}
}

// TestPing: a reachable server answers; an address nobody listens on
// gives ErrUnreachable.
func TestPing(t *testing.T) {
	ctx := context.Background()
	if err := newClient(t, nil).Ping(ctx); err != nil {
		t.Fatal(err)
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer dead.Close()
	if err := newClient(t, dead).Ping(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Ping of a dead address: %v, want ErrUnreachable", err)
	}
}

// TestWaitOnOwnHoldSaysSo: a Lock that waits out its deadline on a lock
// held through another lock context of the same Client says so, instead
// of a bare deadline; a Lock with a lock context that was unlocked says
// why it ended.
func TestWaitOnOwnHoldSaysSo(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	for _, l := range []Locker{mustMutex(t, c, lockName(t)), mustFair(t, c, lockName(t)+":fair"), mustSpinLock(t, c, lockName(t)+":spin")} {
		held := mustLock(t, ctx, l)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := l.Lock(dctx)
		cancel()
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, errHeldHere) {
			t.Errorf("%T: Lock on a lock this Client holds: %v, want ErrNotObtained and errHeldHere", l, err)
		}
		if err := l.Unlock(held); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Lock(held); !errors.Is(err, ErrUnlocked) || !errors.Is(err, context.Canceled) {
			t.Errorf("%T: Lock with an unlocked lock context: %v, want context.Canceled and ErrUnlocked", l, err)
		}
	}
}

// endedMark marks the ctx of a call made with an ended ctx; an attempt
// handed to another goroutine keeps ctx's values (context.WithoutCancel).
type endedMark struct{}

// markedSends is a go-redis hook that counts the commands whose ctx
// carries endedMark.
type markedSends struct{ n atomic.Int32 }

func (m *markedSends) DialHook(next redis.DialHook) redis.DialHook { return next }
func (m *markedSends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(endedMark{}) != nil {
			m.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (m *markedSends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(endedMark{}) != nil {
			m.n.Add(int32(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// TestLockWithEndedCtxMakesNoAttempt: a Lock or TryLock whose ctx has ended
// before it starts fails with ctx's error and sends no attempt. An attempt
// handed to another goroutine could have its reply before the caller
// looked at ctx and take the lock for a caller that has given up (seen as
// TestWaitOnOwnHoldSaysSo's Lock with an unlocked lock context succeeding
// on a loaded machine).
func TestLockWithEndedCtxMakesNoAttempt(t *testing.T) {
	rdb := newRedis(t)
	sends := new(markedSends)
	rdb.AddHook(sends)
	c := newClient(t, rdb)
	name := lockName(t)
	ps := mustPermitSemaphore(t, c, name+":permits")
	if _, err := ps.TrySetPermits(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	rw := mustRW(t, c, name+":rw")
	type call struct {
		what   string
		f      func(context.Context) (context.Context, error)
		unlock func(context.Context) error
	}
	var calls []call
	for _, l := range []Locker{mustMutex(t, c, name), mustFair(t, c, name+":fair"), mustSpinLock(t, c, name+":spin"), rw.ReadLock(), rw.WriteLock()} {
		calls = append(calls, call{fmt.Sprintf("%T.Lock", l), l.Lock, l.Unlock}, call{fmt.Sprintf("%T.TryLock", l), l.TryLock, l.Unlock})
	}
	calls = append(calls, call{"PermitSemaphore.Acquire", ps.Acquire, ps.Release}, call{"PermitSemaphore.TryAcquire", ps.TryAcquire, ps.Release})
	marked := context.WithValue(context.Background(), endedMark{}, true)
	cancelled, cancel := context.WithCancel(marked)
	cancel()
	expired, cancel := context.WithDeadline(marked, time.Now().Add(-time.Second))
	defer cancel()
	for _, ended := range []context.Context{cancelled, expired} {
		for _, cl := range calls {
			for range 20 {
				if _, err := cl.f(ended); !errors.Is(err, ErrNotObtained) || !errors.Is(err, ended.Err()) {
					t.Fatalf("%s with an ended ctx: %v, want ErrNotObtained and %v", cl.what, err, ended.Err())
				}
			}
		}
	}
	// An attempt handed to another goroutine is on its way by now; a
	// round trip on each lock, through the same connections, gives it
	// time to reach the hook.
	for _, cl := range calls {
		lctx, err := cl.f(t.Context())
		if err != nil {
			t.Fatalf("%s with a live ctx: %v", cl.what, err)
		}
		if err := cl.unlock(lctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := sends.n.Load(); n != 0 {
		t.Errorf("%d commands sent for attempts whose ctx had ended", n)
	}
}

// TestLostLockLoggedByDefault: without WithLogger a lost lock is reported
// through slog.Default.
func TestLostLockLoggedByDefault(t *testing.T) {
	var buf syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	ctx := context.Background()
	c := newClient(t, nil, WithWatchdogTimeout(300*time.Millisecond))
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)
	if _, err := m.ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss not noticed")
	}
	if !strings.Contains(buf.String(), "dlock: lock lost") {
		t.Errorf("default log has no lost lock: %q", buf.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
