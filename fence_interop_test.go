package dlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's FencedLock acquire (RedissonFencedLock): RLock's script plus
// an INCR of the token key on every acquisition, re-entries included.
// KEYS: lock, token key. ARGV: lease, owner. {-1, token} when acquired,
// else {pttl, -1}.
var javaFencedAcquire = redis.NewScript(`
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  local token = redis.call('incr', KEYS[2]);
  return {-1, token};
end;
return {redis.call('pttl', KEYS[1]), -1};`)

// TestRedissonFencedLockTokens: a Redisson FencedLock and a fenced dlock
// Mutex take turns on one name. Each token must be above the one before,
// whoever took it: Redisson's INCR continues from the counter, so the
// counter must hold the last token dlock handed out (dlock's tokens come
// from the server's clock, far above the counts Redisson would reach).
func TestRedissonFencedLockTokens(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name, WithFencing())
	jvm := newJVM(t, 30*time.Second)
	java := jvm.lock(javaRLock, name)
	tokenKey := prefixName(tokenPrefix, name)
	t.Cleanup(func() { newRedis(t).Del(ctx, tokenKey) })

	var last int64
	next := func(who string, tok int64) {
		t.Helper()
		if tok <= last {
			t.Errorf("%s: token %d, not above the last one, %d", who, tok, last)
		}
		last = tok
	}
	for round := range 3 {
		lctx := mustLock(t, ctx, m)
		tok, _ := Token(lctx)
		next("dlock", tok)
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}

		// A Redisson thread, once and then re-entering.
		for range 2 {
			res, err := javaFencedAcquire.Run(ctx, jvm.rdb, []string{name, tokenKey}, jvm.lease.Milliseconds(), java.owner(1)).Int64Slice()
			if err != nil || len(res) != 2 || res[0] != -1 {
				t.Fatalf("round %d: Redisson's fenced acquire: %v, %v", round, res, err)
			}
			next("Redisson", res[1])
		}
		for range 2 {
			if _, err := java.unlock(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, err := jvm.rdb.Get(ctx, tokenKey).Int64(); n != last || err != nil {
		t.Errorf("token key %d, %v; want the last token, %d", n, err, last)
	}
}
