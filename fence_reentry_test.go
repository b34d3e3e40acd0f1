package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A fenced hold whose token counter is lost while it is held: deleted
// (Redisson's delete() deletes it), or set back below the holder's token
// (a failover to a replica that missed the last increments). A re-entry
// of the holder must still get a token above the one it holds: not 0,
// and not below it, or the holder's own next fenced write is refused.

// counterLosses are the two ways a counter is lost under a holder with
// token tok.
var counterLosses = []struct {
	name string
	lose func(ctx context.Context, rdb redis.Cmdable, key string, tok int64) error
}{
	{"deleted", func(ctx context.Context, rdb redis.Cmdable, key string, _ int64) error {
		return rdb.Del(ctx, key).Err()
	}},
	{"set back", func(ctx context.Context, rdb redis.Cmdable, key string, tok int64) error {
		return rdb.Set(ctx, key, tok-5, 0).Err()
	}},
}

// TestReentryTokenAfterLostCounter: for every fenced kind and both
// losses, the re-entry's token is above the holder's first one, and the
// holder writes with either Fence, first the old and then the new. The
// counters start above the server's clock (counterAboveClock), so that
// only the rule for re-entries, not the clock floor, keeps the token up.
func TestReentryTokenAfterLostCounter(t *testing.T) {
	for _, loss := range counterLosses {
		t.Run(loss.name, func(t *testing.T) {
			ctx := boundedCtx(t, 30*time.Second)
			admin := newRedis(t)
			name := lockName(t)
			kinds := fencedKinds(t, newClient(t, nil), name)
			lockNames := []string{name, name + ":fair", name + ":rw", name + ":rw"}
			for i, k := range kinds {
				counter := prefixName(tokenPrefix, lockNames[i])
				counterAboveClock(t, admin, lockNames[i])
				lctx := mustLock(t, ctx, k.locker)
				first, _ := Token(lctx)
				if err := loss.lose(ctx, admin, counter, first); err != nil {
					t.Fatal(err)
				}
				rctx := mustLock(t, lctx, k.locker) // the re-entry
				again, ok := Token(rctx)
				if !ok || again <= first {
					t.Errorf("%s: counter %s: the re-entry's token is %d (ok %v), not above the holder's %d", k.name, loss.name, again, ok, first)
				}
				data := "data:" + lockNames[i] + ":" + k.name
				for _, f := range []Fence{FenceOf(lctx), FenceOf(rctx)} {
					if err := FencedSet(ctx, admin, f, data, "v", time.Minute); err != nil {
						t.Errorf("%s: counter %s: the holder's fenced write with token %d: %v", k.name, loss.name, f.Token, err)
					}
				}
				admin.Del(ctx, data, FenceKey(data))
				for _, l := range []context.Context{rctx, lctx} {
					if err := k.locker.Unlock(l); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestUnfencedReentryMakesNoCounter: a lock taken and re-entered without
// WithFencing never writes a token counter, for any kind.
func TestUnfencedReentryMakesNoCounter(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c := newClient(t, nil)
	admin := newRedis(t)
	name := lockName(t)
	m := mustMutex(t, c, name)
	f, err := c.NewFairMutex(name + ":fair")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.NewRWMutex(name + ":rw")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []fencedLocker{{"Mutex", m}, {"FairMutex", f}, {"RWMutex write", rw.WriteLock()}, {"RWMutex read", rw.ReadLock()}}
	lockNames := []string{name, name + ":fair", name + ":rw", name + ":rw"}
	for i, k := range kinds {
		lctx := mustLock(t, ctx, k.locker)
		rctx := mustLock(t, lctx, k.locker)
		if _, ok := Token(rctx); ok {
			t.Errorf("%s: an unfenced re-entry has a token", k.name)
		}
		counter := prefixName(tokenPrefix, lockNames[i])
		if n, err := admin.Exists(ctx, counter).Result(); n != 0 || err != nil {
			t.Errorf("%s: an unfenced lock and its re-entry left the token counter %s (%d, %v)", k.name, counter, n, err)
		}
		for _, l := range []context.Context{rctx, lctx} {
			if err := k.locker.Unlock(l); err != nil {
				t.Fatal(err)
			}
		}
	}
}
