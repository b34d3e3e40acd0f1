package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFencedSet: a fenced SET goes through with a token at least as high
// as any written before, and is refused, writing nothing, with a lower one.
func TestFencedSet(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	rdb := newRedis(t)
	key := lockName(t) + ":value"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })

	write := func(token int64, value string) error {
		t.Helper()
		return FencedSet(ctx, rdb, Fence{token, "a"}, key, value, 0)
	}
	for _, w := range []struct {
		token int64
		value string
		stale bool
	}{
		{10, "a", false},
		{10, "b", false}, // the same holder again
		{9, "stale", true},
		{11, "c", false},
		{10, "stale", true},
	} {
		err := write(w.token, w.value)
		if w.stale != errors.Is(err, ErrStaleToken) || (!w.stale && err != nil) {
			t.Errorf("token %d: %v, want stale %v", w.token, err, w.stale)
		}
	}
	if v, err := rdb.Get(ctx, key).Result(); v != "c" || err != nil {
		t.Errorf("value %q, %v; want c (stale writes refused)", v, err)
	}
	if v, err := rdb.Get(ctx, FenceKey(key)).Result(); v != "11 a" || err != nil {
		t.Errorf("fence key %q, %v; want 11 a", v, err)
	}
	if err := FencedSet(ctx, rdb, Fence{12, "a"}, key, "d", time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := pttl(t, rdb, key); d <= 0 || d > time.Minute {
		t.Errorf("value's ttl %v, want up to a minute", d)
	}
	if d := pttl(t, rdb, FenceKey(key)); d != -1*time.Millisecond && d != -1 {
		t.Errorf("fence key's ttl %v, want none", d)
	}
}

// TestFencedSetSubMillisecondTTL: a ttl under a millisecond is a ttl, not
// "none": FencedSet rounds it up to 1 ms (the SET's PX unit), so that the
// value expires. Truncated to 0 it would be written without a lifetime
// and outlive every holder (PTTL -1).
func TestFencedSetSubMillisecondTTL(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	rdb := newRedis(t)
	key := lockName(t) + ":value"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })
	if err := FencedSet(ctx, rdb, Fence{1, "a"}, key, "v", 500*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	// Gone already (-2) or about to be: anything but no expiry.
	if d := pttl(t, rdb, key); d == -1 || d == -time.Millisecond {
		t.Fatalf("value written with a ttl of 500µs has no expiry (PTTL %v)", d)
	}
	eventually(t, 5*time.Second, func() error {
		if exists(t, rdb, key) {
			return fmt.Errorf("value with a ttl of 500µs still there (PTTL %v)", pttl(t, rdb, key))
		}
		return nil
	})
}

// TestFencedSetEqualToken: an equal token is let through only from the
// holder that wrote it last. Two masters of a split brain that grant in
// the same microsecond hand out the same token to two holders; the
// second one's write is refused, the first one's next writes are not.
func TestFencedSetEqualToken(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	rdb := newRedis(t)
	key := lockName(t) + ":value"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })
	for i, w := range []struct {
		f     Fence
		stale bool
	}{
		{Fence{10, "a"}, false},
		{Fence{10, "a"}, false}, // the same holder again
		{Fence{10, "b"}, true},  // the same token granted to another
		{Fence{10, "a"}, false},
		{Fence{11, "b"}, false},
		{Fence{11, "a"}, true},
		{Fence{11, "b"}, false},
	} {
		err := FencedSet(ctx, rdb, w.f, key, fmt.Sprint(i), 0)
		if w.stale != errors.Is(err, ErrStaleToken) || (!w.stale && err != nil) {
			t.Errorf("write %d %+v: %v, want stale %v", i, w.f, err, w.stale)
		}
	}
	if v, err := rdb.Get(ctx, key).Result(); v != "6" || err != nil {
		t.Errorf("value %q, %v; want 6 (the other holders' equal tokens refused)", v, err)
	}
	// A fence key written by an earlier dlock holds the token alone: an
	// equal token is refused (its holder is unknown), a higher one not.
	rdb.Set(ctx, FenceKey(key), "20", 0)
	if err := FencedHSet(ctx, rdb, Fence{20, "a"}, key+"h", "f", "v"); err != nil {
		t.Fatal(err) // another key: no fence yet
	}
	if err := FencedSet(ctx, rdb, Fence{20, "a"}, key, "x", 0); !errors.Is(err, ErrStaleToken) {
		t.Errorf("equal token over a holderless fence: %v, want ErrStaleToken", err)
	}
	if err := FencedSet(ctx, rdb, Fence{21, "a"}, key, "y", 0); err != nil {
		t.Errorf("higher token over a holderless fence: %v", err)
	}
	rdb.Del(ctx, key+"h", FenceKey(key+"h"))
}

// TestFenceOf: a fenced lock's Fence is its token and its owner, nested
// contexts see it, and an unfenced lock has none.
func TestFenceOf(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	c := newClient(t, nil)
	name := lockName(t)
	m := mustMutex(t, c, name, WithFencing())
	l := mustLock(t, ctx, m)
	type nested struct{}
	f := FenceOf(context.WithValue(l, nested{}, 1))
	token, _ := Token(l)
	owner, _ := c.Owner(l)
	if f.Token != token || f.Holder != owner || token <= 0 || owner == "" {
		t.Errorf("FenceOf %+v, want token %d and owner %q", f, token, owner)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	plain := mustMutex(t, c, name+":plain")
	lp := mustLock(t, ctx, plain)
	if f := FenceOf(lp); f != (Fence{}) {
		t.Errorf("FenceOf an unfenced lock: %+v, want the zero Fence", f)
	}
	if err := plain.Unlock(lp); err != nil {
		t.Fatal(err)
	}
}

// TestFencedHSet: the same for fields of a hash.
func TestFencedHSet(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	rdb := newRedis(t)
	key := lockName(t) + ":hash"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })
	if err := FencedHSet(ctx, rdb, Fence{5, "a"}, key, "owner", "a", "n", 1); err != nil {
		t.Fatal(err)
	}
	if err := FencedHSet(ctx, rdb, Fence{4, "a"}, key, "owner", "stale"); !errors.Is(err, ErrStaleToken) {
		t.Errorf("lower token: %v, want ErrStaleToken", err)
	}
	if err := FencedHSet(ctx, rdb, Fence{6, "a"}, key, "n", 2); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.HGetAll(ctx, key).Result(); err != nil || v["owner"] != "a" || v["n"] != "2" {
		t.Errorf("hash %v, %v; want owner a, n 2", v, err)
	}
}

// TestFencedHSetFails: an HSET that fails (the key holds a string) leaves
// the fence key as it was, so that the holders of the tokens between the
// old and the refused one can still write.
func TestFencedHSetFails(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	rdb := newRedis(t)
	key := lockName(t) + ":string"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })
	if err := FencedSet(ctx, rdb, Fence{5, "a"}, key, "a string", 0); err != nil {
		t.Fatal(err)
	}
	if err := FencedHSet(ctx, rdb, Fence{9, "a"}, key, "f", "v"); err == nil || errors.Is(err, ErrStaleToken) {
		t.Errorf("HSET on a string: %v, want the WRONGTYPE error", err)
	}
	if v, err := rdb.Get(ctx, FenceKey(key)).Result(); v != "5 a" || err != nil {
		t.Errorf("fence key %q, %v after a failed write; want 5 a", v, err)
	}
	if err := FencedSet(ctx, rdb, Fence{7, "a"}, key, "b", 0); err != nil {
		t.Errorf("token 7 after the failed write of 9: %v", err)
	}
}

// TestFencedHSetManyFields: more field-value pairs than Lua's unpack
// takes at once are all written.
func TestFencedHSetManyFields(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	rdb := newRedis(t)
	key := lockName(t) + ":hash"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })
	const n = 10001
	values := make([]any, 0, 2*n)
	for i := range n {
		values = append(values, fmt.Sprint("f", i), i)
	}
	if err := FencedHSet(ctx, rdb, Fence{3, "a"}, key, values...); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.HLen(ctx, key).Result(); got != n || err != nil {
		t.Errorf("%d fields, %v; want %d", got, err, n)
	}
	if v, err := rdb.HGet(ctx, key, fmt.Sprint("f", n-1)).Int(); v != n-1 || err != nil {
		t.Errorf("last field %d, %v; want %d", v, err, n-1)
	}
}

// TestFencedWriteInput: bad input is refused before Redis is asked.
func TestFencedWriteInput(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	rdb := newRedis(t)
	for name, err := range map[string]error{
		"token 0":         FencedSet(ctx, rdb, Fence{0, "a"}, "k", "v", 0),
		"negative token":  FencedSet(ctx, rdb, Fence{-1, "a"}, "k", "v", 0),
		"negative ttl":    FencedSet(ctx, rdb, Fence{1, "a"}, "k", "v", -time.Second),
		"empty key":       FencedSet(ctx, rdb, Fence{1, "a"}, "", "v", 0),
		"odd values":      FencedHSet(ctx, rdb, Fence{1, "a"}, "k", "f"),
		"no values":       FencedHSet(ctx, rdb, Fence{1, "a"}, "k"),
		"token > 2^53":    FencedSet(ctx, rdb, Fence{1<<53 + 1, "a"}, "k", "v", 0),
		"hset > 2^53":     FencedHSet(ctx, rdb, Fence{1<<53 + 1, "a"}, "k", "f", "v"),
		"check > 2^53":    CheckToken(ctx, nil, "r", Fence{1<<53 + 1, "a"}),
		"no holder":       FencedSet(ctx, rdb, Fence{1, ""}, "k", "v", 0),
		"hset no holder":  FencedHSet(ctx, rdb, Fence{1, ""}, "k", "f", "v"),
		"check no holder": CheckToken(ctx, nil, "r", Fence{1, ""}),
	} {
		if !errors.Is(err, ErrInvalidOption) || (strings.Contains(name, "2^53") && !strings.Contains(err.Error(), "2^53")) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if n, _ := rdb.Exists(ctx, "k", FenceKey("k")).Result(); n != 0 {
		t.Errorf("%d keys written by refused calls", n)
	}
	for _, table := range []string{"a;drop", "a b", "1a", "a.b.c"} {
		if err := (SQLFence{Table: table}).Check(ctx, nil, "r", Fence{1, "a"}); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("table %q: %v, want ErrInvalidOption", table, err)
		}
	}
	if err := CheckToken(ctx, nil, "r", Fence{1, "a"}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil tx: %v, want ErrInvalidOption", err)
	}
}

// TestFencedWriteRejectsPausedHolder is the founding articles' third
// experiment on Redis: a holder whose work outlasts its lease loses the
// lock to another, which writes; the first holder's late write carries
// an older token and is refused.
func TestFencedWriteRejectsPausedHolder(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	rdb := newRedis(t)
	name := lockName(t)
	key := name + ":data"
	t.Cleanup(func() { rdb.Del(context.Background(), key, FenceKey(key)) })
	slow := mustMutex(t, newClient(t, nil), name, WithFencing(), WithLease(200*time.Millisecond))
	fast := mustMutex(t, newClient(t, nil), name, WithFencing())

	l1 := mustLock(t, ctx, slow)
	f1 := FenceOf(l1)
	awaitDone(t, l1, 5*time.Second, "the slow holder's lease to run out") // its work outlasts the lease
	l2 := mustLock(t, ctx, fast)
	f2 := FenceOf(l2)
	if err := FencedSet(ctx, rdb, f2, key, "fast", 0); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	// The slow holder ignores its cancelled context and writes anyway.
	if err := FencedSet(ctx, rdb, f1, key, "slow", 0); !errors.Is(err, ErrStaleToken) {
		t.Errorf("the old holder's write (token %d after %d): %v, want ErrStaleToken", f1.Token, f2.Token, err)
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != "fast" {
		t.Errorf("value %q, want the new holder's", v)
	}
	if err := fast.Unlock(l2); err != nil {
		t.Fatal(err)
	}

}

// TestFencedSetCluster: the token key is in the value's slot, with or
// without a hash tag in the key, so the script runs on a cluster.
func TestFencedSetCluster(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	cl := sharedCluster(t).Client()
	defer cl.Close()
	for _, key := range []string{lockName(t) + ":plain", "{" + lockName(t) + "}:tagged"} {
		if err := FencedSet(ctx, cl, Fence{7, "a"}, key, "v", 0); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := FencedHSet(ctx, cl, Fence{6, "a"}, key+":h", "f", "v"); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := FencedSet(ctx, cl, Fence{6, "a"}, key, "stale", 0); !errors.Is(err, ErrStaleToken) {
			t.Errorf("%s: lower token: %v, want ErrStaleToken", key, err)
		}
		cl.Del(context.Background(), key, FenceKey(key))
		cl.Del(context.Background(), key+":h", FenceKey(key+":h"))
	}
}
