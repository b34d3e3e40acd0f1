package dlock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// minimalACL is the smallest permission set dlock needs for locks of every
// single-server kind whose names start with "app:", as documented in the
// README: the commands clients send, the commands the scripts call, the
// lock's keys with their companions, and the lock channels.
var minimalACL = []any{
	"on", ">secret", "resetkeys", "resetchannels",
	"~app:*", "~{app:*", "~redisson_lock_token:{app:*", "~redisson_unlock_latch:{app:*",
	"~redisson_lock__channel:{app:*", "~redisson_rwlock:{app:*", "~redisson_lock_queue:{app:*", "~redisson_lock_timeout:{app:*",
	"&redisson_lock__channel:{app:*", "&redisson_rwlock:{app:*",
	"-@all", "+hello", "+ping",
	"+evalsha", "+eval", "+subscribe", "+unsubscribe",
	"+exists", "+hget", "+pttl",
	"+get", "+set", "+del", "+incr", "+incrby", "+pexpire", "+publish", "+time",
	"+hexists", "+hset", "+hdel", "+hlen", "+hkeys",
	"+lindex", "+lrange", "+lpop", "+rpush", "+lrem",
	"+zadd", "+zrem", "+zscore", "+zrange", "+zincrby",
}

func TestMinimalACL(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	user := "dlock-acl-" + strings.ToLower(t.Name())
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, minimalACL...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()

	name := "app:" + lockName(t)
	holder := mustMutex(t, newClient(t, rdb), name, WithFencing())
	wc := newClient(t, rdb)
	waiter := mustMutex(t, wc, name)
	l := mustLock(t, ctx, holder)
	if ok, err := holder.IsLocked(ctx); !ok || err != nil {
		t.Fatalf("IsLocked: %v %v", ok, err)
	}
	if n, err := holder.HoldCount(l); n != 1 || err != nil {
		t.Fatalf("HoldCount: %v %v", n, err)
	}
	if _, err := holder.TTL(ctx); err != nil {
		t.Fatal(err)
	}
	got := lockAndUnlock(ctx, waiter)
	ch := prefixName(channelPrefix, name)
	eventually(t, 5*time.Second, func() error { // NUMSUB as admin: the user may not run it
		if n, err := admin.PubSubNumSub(ctx, ch).Result(); err != nil || n[ch] == 0 || wc.hub.Waiters(ch) == 0 {
			return errors.New("waiter not subscribed yet")
		}
		return nil
	})
	if err := holder.Unlock(l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken under the minimal ACL")
	}
	admin.Del(ctx, "redisson_lock_token:{"+name+"}")

	// The fair and read-write locks, with a waiter each, under the same user.
	fair, err := newClient(t, rdb).NewFairMutex(name + ":fair")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := newClient(t, rdb).NewRWMutex(name + ":rw")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Locker{fair, rw.ReadLock(), rw.WriteLock()} {
		held := mustLock(t, ctx, l)
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			wl, err := l.Lock(wctx) // another owner: waits, unless both read
			if err == nil {
				err = l.Unlock(wl)
			}
			got <- err
		}()
		if err := l.Unlock(held); err != nil {
			t.Fatalf("%s: %v", l.Name(), err)
		}
		if err := recv(t, got, 10*time.Second, l.Name()+" waiter"); err != nil {
			t.Fatalf("%s waiter: %v", l.Name(), err)
		}
	}
	admin.Del(ctx, "redisson_lock_queue:{"+name+":fair}", "redisson_lock_timeout:{"+name+":fair}")

	// A lock outside the permitted key pattern fails with a clear error.
	other := mustMutex(t, newClient(t, rdb), "other:"+t.Name())
	_, err = other.Lock(ctx)
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("lock outside the ACL's keys: %v, want a NOPERM error", err)
	}
	if errors.Is(err, ErrNotObtained) {
		t.Error("a permission error must not look like a busy lock")
	}
	t.Log(err)
}

// TestSubscriptionRefusedIsLogged: a user that may lock but not subscribe
// (no channel permission) still gets the lock, at the holder's TTL, and
// the Client says why it waited that long.
func TestSubscriptionRefusedIsLogged(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t)
	user := "dlock-acl-nochan"
	acl := slices.Clone(minimalACL)
	acl = slices.DeleteFunc(acl, func(a any) bool { s, _ := a.(string); return strings.HasPrefix(s, "&") })
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, acl...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()
	var logs syncBuf
	c := newClient(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	name := "app:" + lockName(t)
	holder := mustMutex(t, newClient(t, nil), name, WithLease(300*time.Millisecond))
	mustLock(t, ctx, holder) // never unlocked: it expires
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m := mustMutex(t, c, name)
	l, err := m.Lock(wctx)
	if err != nil {
		t.Fatalf("waiter without channel permission: %v", err)
	}
	_ = m.Unlock(l)
	if !strings.Contains(logs.String(), "subscription refused") || !strings.Contains(logs.String(), "NOPERM") {
		t.Errorf("nothing logged about the refused subscription: %q", logs.String())
	}
}

// TestFairSubscriptionRefusedFreeLock: a FairMutex whose user may lock but
// not subscribe to the fair lock's channel takes the lock at once when it
// is free, also when the Client guesses it is taken (a Lock found it held
// before) and subscribes before its first attempt: the wait for that
// subscription's confirmation, which never comes, is bounded.
func TestFairSubscriptionRefusedFreeLock(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	admin := newRedis(t)
	user := "dlock-acl-nofairchan"
	acl := slices.DeleteFunc(slices.Clone(minimalACL), func(a any) bool {
		s, _ := a.(string)
		return strings.HasPrefix(s, "&redisson_lock__channel")
	})
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, acl...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()

	name := "app:" + lockName(t)
	holder, err := newClient(t, nil).NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := newClient(t, rdb).NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, ctx, holder)
	busy, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = f.Lock(busy) // finds it taken: the next Lock subscribes first
	cancel()
	if err == nil {
		t.Fatal("Lock of a held fair lock succeeded")
	}
	if err := holder.Unlock(l); err != nil {
		t.Fatal(err)
	}
	free, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	l2, err := f.Lock(free)
	if err != nil {
		t.Fatalf("Lock of a free fair lock, without permission for its channel: %v after %v", err, time.Since(start))
	}
	t.Logf("took the free lock in %v", time.Since(start))
	if err := f.Unlock(l2); err != nil {
		t.Fatal(err)
	}
}

// syncBuf is a bytes.Buffer safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestElectionObserveSubscriptionRefused: an observer whose user may read
// the election record but not subscribe to its channel polls the record
// instead of hanging, and says so.
func TestElectionObserveSubscriptionRefused(t *testing.T) {
	ctx := boundedCtx(t, 40*time.Second)
	admin := newRedis(t)
	user := "dlock-acl-observe"
	acl := append(slices.Clone(minimalACL), "~dlock:election:{app:*", "+hgetall")
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, acl...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()
	var logs syncBuf
	c := newClient(t, rdb, WithWatchdogTimeout(3*time.Second), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	name := "app:" + lockName(t)
	seen := newElection(t, c, name).Observe(ctx)
	leader := newElection(t, newClient(t, nil), name)
	lead := mustCampaign(t, ctx, leader, "v1")
	defer func() { _ = leader.Resign(lead) }()
	// The first report may be "no leader" (read before the Campaign).
	deadline := time.After(observeSubscribeWait + 10*time.Second)
	for got := (LeaderInfo{}); got.Value != "v1"; {
		select {
		case got = <-seen:
		case <-deadline:
			t.Fatalf("observer without channel permission never saw the leader; logs: %q", logs.String())
		}
	}
	if !strings.Contains(logs.String(), "polling") {
		t.Errorf("nothing logged about polling: %q", logs.String())
	}
}

// TestElectionRefusedObserverPolls: an observer whose subscription is
// refused polls the record every third of its watchdog timeout, so that a
// Proclaim reaches it within one poll, not at the record's expiry (the
// leader's lease, 30s here, which the leader keeps renewing).
func TestElectionRefusedObserverPolls(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	admin := newRedis(t)
	user := "dlock-acl-observe-poll"
	acl := append(slices.Clone(minimalACL), "~dlock:election:{app:*", "+hgetall")
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, acl...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()
	const watchdog = 3 * time.Second // polls every second
	observer := newElection(t, newClient(t, rdb, WithWatchdogTimeout(watchdog)), "app:"+lockName(t))
	leader := newElection(t, newClient(t, nil), observer.Name()) // the default 30s lease
	lead := mustCampaign(t, ctx, leader, "v1")
	defer func() { _ = leader.Resign(lead) }()
	seen := observer.Observe(ctx)
	if got := recv(t, seen, observeSubscribeWait+10*time.Second, "the refused observer's first report"); got.Value != "v1" {
		t.Fatalf("refused observer's first report %+v, want v1", got)
	}
	if err := leader.Proclaim(lead, "v2"); err != nil {
		t.Fatal(err)
	}
	// One poll (a second) and a generous allowance for a loaded machine,
	// far below the 20s and more until the record's expiry.
	if got := recv(t, seen, observer.pollEvery()+4*time.Second, "the Proclaim at the refused observer, which polls every "+observer.pollEvery().String()); got.Value != "v2" || got.Seq != 1 {
		t.Errorf("refused observer reported %+v after the Proclaim, want v2 (seq 1)", got)
	}
}
