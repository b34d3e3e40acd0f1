package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestNoKeysLeftBehind runs each kind through first and reentrant Locks,
// a TryLock of another owner that fails, contention with waiters of two
// Clients (hand-overs included), a Lock given up by its deadline, and the
// Unlocks: afterwards Redis holds no key but the fencing counter. (Before
// the engine rework every acquire and release left a request latch for
// 20 s.)
func TestNoKeysLeftBehind(t *testing.T) {
	srv := redistest.NewServer(t)
	kinds := []struct {
		name string
		make func(c *Client, name string) Locker
	}{
		{"mutex", func(c *Client, n string) Locker { return mustMutex(t, c, n, WithFencing()) }},
		{"mutex-lease", func(c *Client, n string) Locker { return mustMutex(t, c, n, WithLease(10*time.Second)) }},
		{"fair", func(c *Client, n string) Locker { return mustFair(t, c, n, WithFencing()) }},
		{"read", func(c *Client, n string) Locker { return mustRW(t, c, n).ReadLock() }},
		{"write", func(c *Client, n string) Locker { return mustRW(t, c, n, WithFencing()).WriteLock() }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			admin := srv.Client()
			defer admin.Close()
			if err := admin.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			clients := []*Client{newClient(t, srv.Client()), newClient(t, srv.Client())}
			name := "keys:" + k.name
			l0 := k.make(clients[0], name)
			outer := mustLock(t, ctx, l0)
			inner := mustLock(t, outer, l0)
			other := k.make(clients[1], name)
			if k.name != "read" {
				if _, err := other.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
					t.Fatalf("TryLock of another owner: %v, want ErrNotObtained", err)
				}
				short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				if _, err := other.Lock(short); !errors.Is(err, ErrNotObtained) {
					t.Fatalf("Lock given up: %v, want ErrNotObtained", err)
				}
				cancel()
			}
			for _, l := range []context.Context{inner, outer} {
				if err := l0.Unlock(l); err != nil {
					t.Fatal(err)
				}
			}
			contend(t, ctx, clients, func(c *Client) Locker { return k.make(c, name) })
			eventually(t, 5*time.Second, func() error {
				keys, err := admin.Keys(ctx, "*").Result()
				if err != nil {
					return err
				}
				var left []string
				for _, key := range keys {
					// The fencing counter stays by design, and each open
					// Client's holder record (clientinfo.go) until Close,
					// with the seen set of the Clients that wrote one.
					if key != prefixName(tokenPrefix, name) && key != layout.ClientSeenKey &&
						key != clientRecordPrefix+clients[0].ID() && key != clientRecordPrefix+clients[1].ID() {
						left = append(left, key)
					}
				}
				if len(left) > 0 {
					return fmt.Errorf("keys left: %v", left)
				}
				return nil
			})
		})
	}
}

// contend has 4 goroutines on each Client take and release the lock 20
// times each.
func contend(t *testing.T, ctx context.Context, clients []*Client, newLock func(*Client) Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, c := range clients {
		l := newLock(c)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					lctx, err := l.Lock(ctx)
					if err == nil {
						err = l.Unlock(lctx)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, time.Minute, "the contending goroutines")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDeadlinesOnFrozenServer: with go-redis's default options (no
// ContextTimeoutEnabled, a 3 s read timeout), a server that stops
// answering (SIGSTOP) must not hold Lock, TryLock or Unlock past their
// deadline: they return within it plus 50 ms, and their cleanup goes on in
// the background. Once the server answers again, the lock ends up free and
// nothing is left in Redis. With ContextTimeoutEnabled, where attempts run
// on the caller's goroutine and go-redis itself gives up at the deadline,
// the same holds.
func TestDeadlinesOnFrozenServer(t *testing.T) {
	t.Run("default", func(t *testing.T) { testDeadlinesOnFrozenServer(t, &redis.Options{}) })
	t.Run("ContextTimeoutEnabled", func(t *testing.T) {
		testDeadlinesOnFrozenServer(t, &redis.Options{ContextTimeoutEnabled: true})
	})
}

func testDeadlinesOnFrozenServer(t *testing.T, opt *redis.Options) {
	ctx := context.Background()
	srv := redistest.NewServer(t)
	opt.Addr = srv.Addr()
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	c := newClient(t, rdb)
	name := "frozen"
	m := mustMutex(t, c, name)
	held := mustLock(t, ctx, m)
	other := mustMutex(t, c, name)
	fresh := mustMutex(t, c, "frozen:free")

	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	const deadline = 300 * time.Millisecond
	within := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		err := f(dctx)
		if took := time.Since(start); took > deadline+50*time.Millisecond {
			t.Errorf("%s returned after %v with a %v deadline", what, took, deadline)
		}
		if err == nil {
			t.Errorf("%s succeeded on a frozen server", what)
		}
	}
	// First, while dlock still takes Redis for reachable (the reach gate): Locks
	// with a later deadline fill the Client's batcher (internal/transport), and a
	// Lock behind them must still return by its own deadline. (With
	// ContextTimeoutEnabled a script with a deadline is never batched:
	// TestBatchSendsDeadlineScriptsAlone.)
	if !c.tr.SendsDeadlinesAlone() {
		var slow sync.WaitGroup
		for i := range maxOnWire + 1 {
			slow.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, 4*deadline)
				defer cancel()
				_, _ = mustMutex(t, c, fmt.Sprintf("frozen:slow:%d", i)).Lock(sctx)
			})
		}
		eventually(t, time.Second, func() error {
			if onWireNow(c) < maxOnWire {
				return errors.New("the batcher has room")
			}
			return nil
		})
		within("Lock behind a full batcher", func(dctx context.Context) error { _, err := fresh.Lock(dctx); return err })
		slow.Wait()
	}
	within("Lock of a held lock", func(dctx context.Context) error { _, err := other.Lock(dctx); return err })
	within("Lock of a free lock", func(dctx context.Context) error { _, err := fresh.Lock(dctx); return err })
	within("TryLock", func(dctx context.Context) error { _, err := other.TryLock(dctx); return err })
	within("Unlock", func(dctx context.Context) error {
		uctx, cancel := context.WithDeadline(held, time.Now().Add(deadline)) // derived from the lock context
		defer cancel()
		return m.Unlock(uctx)
	})
	if !errors.Is(context.Cause(held), ErrUnlocked) {
		t.Errorf("lock context cause %v, want ErrUnlocked", context.Cause(held))
	}

	srv.Resume()
	resumed = true
	admin := srv.Client()
	defer admin.Close()
	eventually(t, 15*time.Second, func() error {
		keys, err := admin.Keys(ctx, "*").Result()
		// The Client's holder record (clientinfo.go) stays until Close.
		keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, clientRecordPrefix) })
		if err == nil && len(keys) > 0 {
			err = fmt.Errorf("keys left: %v", keys)
		}
		return err
	})
}
