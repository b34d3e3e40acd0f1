package dlock

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// The permit ids a hand-over uses: a sleeping waiter is handed a permit
// under an id no attempt of it used (an attempt that failed without an
// answer may hold its id, and gives it back in the background), and a
// release to an id held already frees the releaser's permit instead of
// keeping it.

// attemptIDs is a go-redis hook that records the permit id of every
// acquire script call (psem_acquire.lua's ARGV[4]).
type attemptIDs struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (a *attemptIDs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *attemptIDs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a.note(cmd)
		return next(ctx, cmd)
	}
}

func (a *attemptIDs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			a.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (a *attemptIDs) note(cmd redis.Cmder) {
	args := cmd.Args()
	if name := strings.ToLower(cmd.Name()); name != "evalsha" && name != "eval" || len(args) < 10 {
		return
	}
	if args[1] != scripts.PsemAcquire.Hash() && args[1] != scripts.PsemAcquire.Src {
		return
	}
	id, _ := args[9].(string)
	id = hex.EncodeToString([]byte(id)) // as PermitID shows it
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[id] = true
}

func (a *attemptIDs) used(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

// TestPermitSemaphoreHandOverFreshID: a waiter of the releasing Client is
// handed the permit under an id none of its attempts used, and its
// permit context carries that id.
func TestPermitSemaphoreHandOverFreshID(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	ids := &attemptIDs{ids: map[string]bool{}}
	rdb.AddHook(ids)
	name := lockName(t)
	rounds := make(chan int, 16)
	c := newClient(t, rdb, WithObserver(Observer{Wait: func(_ context.Context, l LockInfo, w WaitInfo) {
		if l.Name == name {
			rounds <- w.Round
		}
	}}))
	s := mustPermitSemaphore(t, c, name)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	held, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	recv(t, rounds, 10*time.Second, "the waiter's first sleep")
	eventually(t, 10*time.Second, func() error {
		if n := queuedPlaces(c, s); n != 1 {
			return fmt.Errorf("%d waiters queued, want 1", n)
		}
		return nil
	})
	if err := s.Release(held); err != nil {
		t.Fatal(err)
	}
	p := recv(t, got, 10*time.Second, "the permit handed over")
	if p == nil {
		t.FailNow()
	}
	id, _ := s.PermitID(p)
	if ids.used(id) {
		t.Errorf("the permit was handed over to the id %s of one of the waiter's attempts", id)
	}
	infos, err := s.Permits(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != id {
		t.Fatalf("permits in Redis %+v (%v); the waiter's permit context holds %s", infos, err, id)
	}
	if err := s.Release(p); err != nil {
		t.Fatalf("Release of the permit handed over: %v", err)
	}
	wantAvailable(t, s, 1, 0)
}

// TestPermitReleaseToHeldID: a release that hands its permit to an id
// that holds a permit already (an earlier attempt's, taken without an
// answer) gives the permit back to the pool and publishes it; only a
// re-sent hand-over (the releaser's permit gone, the waiter's there)
// answers "handed" again.
func TestPermitReleaseToHeldID(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rdb := newRedis(t)
	name := lockName(t)
	s := mustPermitSemaphore(t, newClient(t, rdb), name)
	if ok, err := s.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	mine, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, x := rawPermitID(t, s, mine), rawPermitID(t, s, other)
	msgs := channelMessages(t, rdb, s.channel)
	releaseTo := func(from, to string) []int64 {
		t.Helper()
		now := nowMillis(time.Now())
		v, err := scripts.PsemReleaseTo.Run(ctx, rdb, s.keys(), now, s.c.publish, from, to, now+60000, "always", 1).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := releaseTo(r, x); v[0] != 1 {
		t.Errorf("release to an id that holds a permit answered %v, want 1 (freed)", v)
	}
	wantAvailable(t, s, 1, 1)
	eventually(t, 10*time.Second, func() error {
		if m := msgs(); len(m) != 1 || m[0] != "1" {
			return fmt.Errorf("published %q, want [1]", m)
		}
		return nil
	})
	// A re-sent hand-over: the releaser's permit gone, the waiter's held.
	if v := releaseTo(r, x); v[0] != 2 {
		t.Errorf("re-sent hand-over answered %v, want 2 (handed)", v)
	}
	wantAvailable(t, s, 1, 1)
	if err := s.Release(other); err != nil {
		t.Fatal(err)
	}
}

// rawPermitID is the id of the permit permitCtx holds, as Redis has it.
func rawPermitID(t *testing.T, s *PermitSemaphore, permitCtx context.Context) string {
	t.Helper()
	id, ok := s.PermitID(permitCtx)
	raw, err := hex.DecodeString(id)
	if !ok || err != nil {
		t.Fatalf("permit id %q: %v %v", id, ok, err)
	}
	return string(raw)
}
