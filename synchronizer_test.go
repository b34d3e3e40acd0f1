package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts a Redisson client (HEAD, see ../shared/reference/redisson.md
// §9) sends for RSemaphore, RPermitExpirableSemaphore and RCountDownLatch,
// with their KEYS and ARGV in Redisson's order. The publish command is an
// argument, as in Redisson (PUBLISH, or SPUBLISH on a sharded cluster).
var (
	// RSemaphore.tryAcquire(n): KEYS name; ARGV n.
	javaSemTryAcquire = redis.NewScript("local value = redis.call('get', KEYS[1]); " +
		"if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then " +
		"local val = redis.call('decrby', KEYS[1], ARGV[1]); " +
		"return 1; " +
		"end; " +
		"return 0;")
	// RSemaphore.release(n): KEYS name, channel; ARGV n, publish.
	javaSemRelease = redis.NewScript("local value = redis.call('incrby', KEYS[1], ARGV[1]); " +
		"redis.call(ARGV[2], KEYS[2], value); ")
	// RSemaphore.trySetPermits(n): KEYS name, channel; ARGV n, publish.
	javaSemTrySet = redis.NewScript("local value = redis.call('get', KEYS[1]); " +
		"if (value == false) then " +
		"redis.call('set', KEYS[1], ARGV[1]); " +
		"redis.call(ARGV[2], KEYS[2], ARGV[1]); " +
		"return 1;" +
		"end;" +
		"return 0;")

	// RPermitExpirableSemaphore.tryAcquire: KEYS name, timeout zset,
	// channel; ARGV n, timeoutDate, now, nonExpirableTimeout, publish,
	// ids (raw bytes).
	javaPsemTryAcquire = redis.NewScript("local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); " +
		"if #expiredIds > 0 then " +
		"redis.call('zrem', KEYS[2], unpack(expiredIds)); " +
		"local value = redis.call('incrby', KEYS[1], #expiredIds); " +
		"if tonumber(value) > 0 then " +
		"redis.call(ARGV[5], KEYS[3], value); " +
		"end;" +
		"end; " +
		"local value = redis.call('get', KEYS[1]); " +
		"if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then " +
		"redis.call('decrby', KEYS[1], ARGV[1]); " +
		"for i = 6, #ARGV, 1 do " +
		"redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); " +
		"end; " +
		"local ttl = redis.call('pttl', KEYS[1]); " +
		"if ttl > 0 then " +
		"redis.call('pexpire', KEYS[2], ttl); " +
		"end; " +
		"return 'OK'; " +
		"end; " +
		"local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); " +
		"if v[1] ~= nil and v[2] ~= ARGV[4] then " +
		"return ':' .. tostring(v[2]); " +
		"end " +
		"return nil;")
	// RPermitExpirableSemaphore.tryRelease(id): KEYS name, channel,
	// timeout zset; ARGV id, 1, now, publish.
	javaPsemTryRelease = redis.NewScript("local expire = redis.call('zscore', KEYS[3], ARGV[1]);" +
		"local removed = redis.call('zrem', KEYS[3], ARGV[1]);" +
		"if tonumber(removed) ~= 1 then " +
		"return 0;" +
		"end;" +
		"local value = redis.call('incrby', KEYS[1], ARGV[2]); " +
		"redis.call(ARGV[4], KEYS[2], value); " +
		"if tonumber(expire) <= tonumber(ARGV[3]) then " +
		"return 0;" +
		"end;" +
		"return 1;")
	// RPermitExpirableSemaphore.availablePermits: KEYS name, timeout zset,
	// channel; ARGV now, publish.
	javaPsemAvailable = redis.NewScript("local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); " +
		"if #expiredIds > 0 then " +
		"redis.call('zrem', KEYS[2], unpack(expiredIds)); " +
		"local value = redis.call('incrby', KEYS[1], #expiredIds); " +
		"if tonumber(value) > 0 then " +
		"redis.call(ARGV[2], KEYS[3], value); " +
		"end;" +
		"return value; " +
		"end; " +
		"local ret = redis.call('get', KEYS[1]); " +
		"return ret == false and 0 or ret;")

	// RCountDownLatch.countDown: KEYS name, channel; ARGV zero message,
	// publish.
	javaLatchCountDown = redis.NewScript("local v = redis.call('decr', KEYS[1]);" +
		"if v <= 0 then redis.call('del', KEYS[1]) end;" +
		"if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;")
	// RCountDownLatch.trySetCount(n): KEYS name, channel; ARGV new-count
	// message, n, publish.
	javaLatchTrySet = redis.NewScript("if redis.call('exists', KEYS[1]) == 0 then " +
		"redis.call('set', KEYS[1], ARGV[2]); " +
		"redis.call(ARGV[3], KEYS[2], ARGV[1]); " +
		"return 1 " +
		"else " +
		"return 0 " +
		"end")
)

// javaNonExpirable is Redisson's score for a permit without lease.
const javaNonExpirable = "922337203685477"

// javaSync plays a Redisson client for the synchronizers named name on
// rdb. publish is "publish", or "spublish" on a cluster, as a Redisson
// client with sharding on (its default on Redis 7 clusters) sends.
type javaSync struct {
	rdb     redis.UniversalClient
	name    string
	publish string
}

func newJavaSync(rdb redis.UniversalClient, name string) javaSync {
	j := javaSync{rdb: rdb, name: name, publish: "publish"}
	if _, ok := rdb.(*redis.ClusterClient); ok {
		j.publish = "spublish"
	}
	return j
}

func (j javaSync) semChannel() string   { return "redisson_sc:{" + j.name + "}" }
func (j javaSync) latchChannel() string { return "redisson_countdownlatch__channel__{" + j.name + "}" }
func (j javaSync) timeoutKey() string   { return "{" + j.name + "}:timeout" }

func (j javaSync) semTryAcquire(ctx context.Context, n int) (bool, error) {
	v, err := javaSemTryAcquire.Run(ctx, j.rdb, []string{j.name}, n).Int()
	return v == 1, err
}

func (j javaSync) semRelease(ctx context.Context, n int) error {
	err := javaSemRelease.Run(ctx, j.rdb, []string{j.name, j.semChannel()}, n, j.publish).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

func (j javaSync) semTrySet(ctx context.Context, n int) (bool, error) {
	v, err := javaSemTrySet.Run(ctx, j.rdb, []string{j.name, j.semChannel()}, n, j.publish).Int()
	return v == 1, err
}

// psemTryAcquire takes one permit as Redisson does: a fresh id of 16
// random bytes, shown as hex, with a lease (0: none). It returns the hex id
// when it got a permit, and otherwise the ":<score>" answer (or "").
func (j javaSync) psemTryAcquire(ctx context.Context, lease time.Duration) (id, nearest string, err error) {
	raw := make([]byte, 16) // ServiceManager.generateId: 16 random bytes
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	timeout := javaNonExpirable
	now := time.Now().UnixMilli()
	if lease > 0 {
		timeout = strconv.FormatInt(now+lease.Milliseconds(), 10)
	}
	res, err := javaPsemTryAcquire.Run(ctx, j.rdb, []string{j.name, j.timeoutKey(), j.semChannel()},
		1, timeout, now, javaNonExpirable, j.publish, raw).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", "", nil
	case err != nil:
		return "", "", err
	case res == "OK":
		return hex.EncodeToString(raw), "", nil
	}
	return "", res, nil
}

// psemRelease is tryRelease: whether the permit was released (and had not
// expired).
func (j javaSync) psemRelease(ctx context.Context, hexID string) (bool, error) {
	raw, err := hex.DecodeString(hexID)
	if err != nil {
		return false, err
	}
	v, err := javaPsemTryRelease.Run(ctx, j.rdb, []string{j.name, j.semChannel(), j.timeoutKey()},
		raw, 1, time.Now().UnixMilli(), j.publish).Int()
	return v == 1, err
}

func (j javaSync) psemAvailable(ctx context.Context) (int, error) {
	return javaPsemAvailable.Run(ctx, j.rdb, []string{j.name, j.timeoutKey(), j.semChannel()},
		time.Now().UnixMilli(), j.publish).Int()
}

func (j javaSync) latchCountDown(ctx context.Context) error {
	err := javaLatchCountDown.Run(ctx, j.rdb, []string{j.name, j.latchChannel()}, 0, j.publish).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

func (j javaSync) latchTrySet(ctx context.Context, n int) (bool, error) {
	v, err := javaLatchTrySet.Run(ctx, j.rdb, []string{j.name, j.latchChannel()}, 1, n, j.publish).Int()
	return v == 1, err
}

// javaWaiter is a Redisson waiter: subscribed (SSUBSCRIBE on a cluster) to
// channel, it calls try on each message until try succeeds, and reports
// the time it succeeded and the messages it saw.
type javaWaiter struct {
	done chan time.Time
	mu   sync.Mutex
	msgs []string
}

// startJavaWaiter subscribes and waits for the subscription before it
// returns, so that what the test does next is heard.
func startJavaWaiter(t *testing.T, j javaSync, channel string, try func(ctx context.Context) (bool, error)) *javaWaiter {
	t.Helper()
	// A bound on the subscription and on the wait for messages: a waiter
	// never woken gives up, and wokeWithin reports it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var ps *redis.PubSub
	if cc, ok := j.rdb.(*redis.ClusterClient); ok {
		ps = cc.SSubscribe(ctx, channel)
	} else {
		ps = j.rdb.Subscribe(ctx, channel)
	}
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		cancel()
		_ = ps.Close()
		t.Fatalf("Java waiter's subscription to %s: %v", channel, err)
	}
	w := &javaWaiter{done: make(chan time.Time, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); _ = ps.Close(); wg.Wait() })
	// The first try, after the subscription, must fail: the test wants
	// the waiter to wait.
	if ok, err := try(ctx); ok || err != nil {
		t.Fatalf("Java waiter's first try: %v, %v; want it to wait", ok, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				return
			}
			w.mu.Lock()
			w.msgs = append(w.msgs, m.Payload)
			w.mu.Unlock()
			if ok, err := try(ctx); err != nil || ok {
				if err == nil {
					w.done <- time.Now()
				}
				return
			}
		}
	}()
	return w
}

func (w *javaWaiter) messages() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// wokeWithin waits (10s at most) for w to succeed and returns how long
// after since that was.
func (w *javaWaiter) wokeWithin(t *testing.T, since time.Time) time.Duration {
	t.Helper()
	select {
	case at := <-w.done:
		return at.Sub(since)
	case <-time.After(10 * time.Second):
		t.Fatalf("Java waiter not woken (messages %v)", w.messages())
		return 0
	}
}

// waitForSubscriber waits until c's hub has n waiters on channel.
func waitForSyncWaiters(t testing.TB, c *Client, channel string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if got := c.hub.Waiters(channel); got < n {
			return fmt.Errorf("%d waiters on %s, want %d", got, channel, n)
		}
		return nil
	})
}

// interval is one hold of a permit, on the monotonic clock of this process.
type interval struct{ from, to time.Time }

// maxConcurrent returns the largest number of intervals that overlap at
// one instant. Each recorded interval lies inside the time its holder
// believed it held its permits, so more than N is a violation.
func maxConcurrent(holds []interval) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, h := range holds {
		edges = append(edges, edge{h.from, 1}, edge{h.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	most, cur := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

func TestMaxConcurrent(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	holds := []interval{{at(0), at(10)}, {at(5), at(15)}, {at(10), at(20)}, {at(12), at(13)}}
	if got := maxConcurrent(holds); got != 3 {
		t.Fatalf("maxConcurrent = %d, want 3 (5-15, 10-20, 12-13)", got)
	}
	if got := maxConcurrent(holds[:1]); got != 1 {
		t.Fatalf("maxConcurrent = %d, want 1", got)
	}
}

// pushBound is how soon a waiter woken by a message must have its turn.
// A waiter's poll timer starts when it goes to sleep, before the test
// publishes, so a poll can wake it a little under syncPoll after the
// message: anything past half of it was not the message.
const pushBound = syncPoll / 2

// syncACL is the smallest permission set the synchronizers need for names
// starting with "app:", as docs/synchronizers.md documents it: the keys
// (the scripts name the channel among their keys, so it needs a key
// pattern too), the channels, and the commands clients send and scripts
// call.
var syncACL = []any{
	"on", ">secret", "resetkeys", "resetchannels",
	"~app:*", "~{app:*", "~redisson_sc:{app:*", "~redisson_countdownlatch__channel__{app:*",
	"&redisson_sc:{app:*", "&redisson_countdownlatch__channel__{app:*",
	"-@all", "+hello", "+ping", "+evalsha", "+eval", "+subscribe", "+unsubscribe", "+publish",
	"+get", "+set", "+del", "+exists", "+incrby", "+decrby", "+decr", "+pttl", "+pexpire",
	"+zadd", "+zrem", "+zscore", "+zrange", "+zrangebyscore", "+zcard", "+time",
}

// TestSynchronizersMinimalACL runs every synchronizer, waiting included,
// as a user with only syncACL.
func TestSynchronizersMinimalACL(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	admin := newRedis(t)
	user := "dlock-acl-sync"
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, syncACL...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()
	c := newClient(t, rdb)
	name := "app:" + lockName(t)

	// Semaphore: a waiter woken by a release.
	s := mustSemaphore(t, c, name+":sem")
	if _, err := s.TrySetPermits(ctx, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	go func() { done <- s.Acquire(ctx, 1) }()
	waitForSyncWaiters(t, c, s.channel, 1)
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DrainPermits(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// PermitSemaphore: every script, and a waiter.
	ps := mustPermitSemaphore(t, c, name+":psem")
	if err := ps.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := ps.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.UpdateLease(p, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Permits(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		wp, err := ps.Acquire(ctx)
		if err == nil {
			err = ps.Release(wp)
		}
		done <- err
	}()
	waitForSyncWaiters(t, c, ps.channel, 1)
	if err := ps.Release(p); err != nil {
		t.Fatal(err)
	}
	if err := ps.AddPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.AcquiredPermits(ctx); err != nil {
		t.Fatal(err)
	}

	// CountDownLatch: a waiter woken by the zero message.
	l := mustLatch(t, c, name+":latch")
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	go func() { done <- l.Await(ctx) }()
	waitForSyncWaiters(t, c, l.channel, 1)
	if _, err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter did not return under the ACL")
		}
	}
	for _, k := range []string{name + ":sem", name + ":psem", "{" + name + ":psem}:timeout"} {
		admin.Del(ctx, k)
	}
}

// TestSynchronizersRefusedSubscription: a user who may publish on the
// channels (from the scripts) but not SUBSCRIBE gets NOPERM for its
// subscription; its waiters fall back to the poll and still get their
// permit.
func TestSynchronizersRefusedSubscription(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	admin := newRedis(t)
	user := "dlock-acl-nosub"
	acl := slices.DeleteFunc(slices.Clone(syncACL), func(a any) bool { return a == "+subscribe" || a == "+unsubscribe" })
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, acl...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()
	c := newClient(t, rdb)
	name := "app:" + lockName(t)
	s := mustSemaphore(t, c, name)
	done := make(chan error, 1)
	go func() { done <- s.Acquire(ctx, 1) }()
	waitForSyncWaiters(t, c, s.channel, 1)
	released := time.Now()
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("waiter without a subscription got the permit %v after the release (poll %v)", time.Since(released), syncPoll)
	case <-time.After(syncPoll + 5*time.Second):
		t.Fatal("waiter without a subscription never got the permit")
	}
	admin.Del(ctx, name)
}
