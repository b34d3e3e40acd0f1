package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's RSpinLock scripts (RedissonSpinLock): its acquire is RLock's
// (javaLockAcquire); its unlock frees the lock without a message.
var (
	// KEYS: lock, latch. ARGV: lease, owner, latch lifetime.
	javaSpinUnlock = redis.NewScript(`
local val = redis.call('get', KEYS[2]);
if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[1]);
  redis.call('set', KEYS[2], 0, 'px', ARGV[3]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call('set', KEYS[2], 1, 'px', ARGV[3]);
  return 1;
end;`)
)

func mustSpinLock(t testing.TB, c *Client, name string, opts ...LockOption) *SpinLock {
	t.Helper()
	l, err := c.NewSpinLock(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSpinBackoff: Redisson's exponential backoff: 1 ms, then each step
// the previous doubled plus a jitter of less than the failures so far in
// milliseconds (Java's nextInt(++fails)), capped at 128 ms; a constant
// backoff stays put.
func TestSpinBackoff(t *testing.T) {
	k := &spinKind{initial: DefaultSpinInitial, most: DefaultSpinMax}
	for range 20 {
		b := k.newBackoff()
		prev := b.step()
		if prev != time.Millisecond {
			t.Fatalf("first step %v, want 1ms", prev)
		}
		reached := false
		for i := 2; i <= 12; i++ {
			d := b.step()
			hi := min(2*prev+time.Duration(i-2)*time.Millisecond, DefaultSpinMax)
			if d < min(2*prev, DefaultSpinMax) || d > hi {
				t.Fatalf("step %d: %v after %v, want in [%v, %v]", i, d, prev, min(2*prev, DefaultSpinMax), hi)
			}
			reached = reached || d == DefaultSpinMax
			prev = d
		}
		if !reached {
			t.Fatalf("never reached the cap %v (last %v)", DefaultSpinMax, prev)
		}
	}
	c := &spinKind{initial: 64 * time.Millisecond, most: 64 * time.Millisecond}
	b := c.newBackoff()
	for range 5 {
		if d := b.step(); d != 64*time.Millisecond {
			t.Fatalf("constant backoff stepped to %v", d)
		}
	}
}

// TestSpinLockNoPubSub: a waiting SpinLock subscribes to nothing, its
// Unlock publishes nothing, and the waiter still takes the lock soon
// after it is freed (by its backoff, not at the holder's 30 s lease).
func TestSpinLockNoPubSub(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	admin := newRedis(t)
	listen := admin.PSubscribe(ctx, "*")
	defer listen.Close()
	if _, err := listen.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var sleeps atomic.Int64
	holder := mustSpinLock(t, newClient(t, nil), name)
	wc := newClient(t, nil, WithObserver(Observer{Wait: func(context.Context, LockInfo, WaitInfo) { sleeps.Add(1) }}))
	waiter := mustSpinLock(t, wc, name)
	hl := mustLock(t, ctx, holder)
	got := goWaiter(ctx, waiter)
	eventually(t, 10*time.Second, func() error {
		if sleeps.Load() < 3 {
			return errors.New("the waiter has not backed off three times yet")
		}
		return nil
	})
	if chs, err := admin.PubSubChannels(ctx, "*").Result(); err != nil || len(chs) != 0 {
		t.Errorf("channels subscribed while a spin waiter waits: %v (%v)", chs, err)
	}
	start := time.Now()
	if err := holder.Unlock(hl); err != nil {
		t.Fatal(err)
	}
	h := recv(t, got, 10*time.Second, "spin waiter after the unlock")
	if h.err != nil {
		t.Fatal(h.err)
	}
	d := h.at.Sub(start)
	t.Logf("the spin waiter took the lock %v after the unlock", d)
	if d > 5*time.Second {
		t.Errorf("the spin waiter took %v: it slept to the lease, not by its backoff", d)
	}
	h.unlock()
	// Unlocks publish nothing: the first message the listener hears is
	// the one published after them.
	if err := admin.Publish(ctx, "after-unlocks", "x").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := listen.ReceiveMessage(ctx)
	if err != nil || msg.Channel != "after-unlocks" {
		t.Errorf("a spin lock's unlock published %v (%v)", msg, err)
	}
}

// TestSpinLockRedissonInterop: a Java RSpinLock and RLock on the same name
// exclude a Go SpinLock and the other way round; a Go spin waiter takes
// the lock soon after the Java spin unlock (which publishes nothing), and
// a Java spin waiter finds it free after the Go Unlock.
func TestSpinLockRedissonInterop(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	jvm := newJVM(t, DefaultWatchdogTimeout)
	java := jvm.lock(javaRLock, name) // RSpinLock's acquire is RLock's
	l := mustSpinLock(t, newClient(t, nil), name)

	// Java holds (spin or RLock: the same hash): Go is excluded and waits.
	if ok, _, err := java.attempt(ctx, 1, DefaultWatchdogTimeout, 0); !ok || err != nil {
		t.Fatalf("Java tryLock: %v, %v", ok, err)
	}
	if _, err := l.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Go TryLock while Java holds: %v, want ErrNotObtained", err)
	}
	got := goWaiter(ctx, l)
	start := time.Now()
	latch := "redisson_unlock_latch:" + java.tag() + ":spin"
	if n, err := javaSpinUnlock.Run(ctx, jvm.rdb, []string{name, latch}, DefaultWatchdogTimeout.Milliseconds(), java.owner(1), javaLatchTTL.Milliseconds()).Int64(); n != 1 || err != nil {
		t.Fatalf("Java spin unlock: %d, %v", n, err)
	}
	jvm.rdb.Del(ctx, latch)
	h := recv(t, got, 10*time.Second, "Go spin waiter after the Java spin unlock")
	if h.err != nil {
		t.Fatal(h.err)
	}
	t.Logf("Go spin waiter took the lock %v after the Java unlock", h.at.Sub(start))
	if d := h.at.Sub(start); d > 5*time.Second {
		t.Errorf("Go spin waiter took %v after the Java unlock", d)
	}

	// Go holds: Java is excluded (its ttl is the Go hold's lease) until
	// the Go Unlock.
	if ok, ttl, err := java.attempt(ctx, 2, DefaultWatchdogTimeout, 0); ok || err != nil || ttl <= 0 {
		t.Fatalf("Java tryLock while Go holds: %v, ttl %d, %v", ok, ttl, err)
	}
	h.unlock()
	if ok, _, err := java.attempt(ctx, 2, DefaultWatchdogTimeout, 0); !ok || err != nil {
		t.Fatalf("Java tryLock after the Go Unlock: %v, %v", ok, err)
	}
	if _, err := java.unlock(ctx, 2); err != nil {
		t.Fatal(err)
	}

	// A Go Mutex and a Go SpinLock on one name exclude each other.
	m, err := newClient(t, nil).NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	ml := mustLock(t, ctx, m)
	if _, err := l.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("SpinLock TryLock while a Mutex holds: %v, want ErrNotObtained", err)
	}
	if err := m.Unlock(ml); err != nil {
		t.Fatal(err)
	}
}

// TestSpinLockOptions: WithBackoff is a SpinLock's alone, and checked.
func TestSpinLockOptions(t *testing.T) {
	c := newClient(t, nil)
	name := lockName(t)
	for _, bad := range [][2]time.Duration{{0, time.Millisecond}, {2 * time.Millisecond, time.Millisecond}, {time.Millisecond, 2 * time.Minute}} {
		if _, err := c.NewSpinLock(name, WithBackoff(bad[0], bad[1])); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithBackoff(%v, %v): %v, want ErrInvalidOption", bad[0], bad[1], err)
		}
	}
	if _, err := c.NewSpinLock(name, WithBackoff(time.Millisecond, time.Millisecond), WithoutReentry()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithoutReentry on a SpinLock: %v, want ErrInvalidOption", err)
	}
	if _, err := c.NewMutex(name, WithBackoff(time.Millisecond, time.Millisecond)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithBackoff on a Mutex: %v, want ErrInvalidOption", err)
	}
}

// TestSpinUnlockWakesMutexWaiterHere: a Mutex waiter of the Client whose
// SpinLock holds the same name takes it soon after the SpinLock's Unlock,
// not at the end of the spin hold's lease: the spin release publishes
// nothing, but it wakes this Client's waiters on the name to try again.
func TestSpinUnlockWakesMutexWaiterHere(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	var sleeps atomic.Int64
	c := newClient(t, nil, WithObserver(Observer{Wait: func(context.Context, LockInfo, WaitInfo) { sleeps.Add(1) }}))
	spin := mustSpinLock(t, c, name, WithLease(40*time.Second))
	mu, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	sl := mustLock(t, ctx, spin)
	got := goWaiter(ctx, mu)
	eventually(t, 10*time.Second, func() error {
		if sleeps.Load() < 2 {
			return errors.New("the Mutex waiter has not slept past its first sleep yet")
		}
		return nil
	})
	start := time.Now()
	if err := spin.Unlock(sl); err != nil {
		t.Fatal(err)
	}
	h := recv(t, got, 20*time.Second, "Mutex waiter after the spin unlock")
	if h.err != nil {
		t.Fatal(h.err)
	}
	d := h.at.Sub(start)
	t.Logf("the Mutex waiter took the lock %v after the spin unlock", d)
	if d > 10*time.Second {
		t.Errorf("the Mutex waiter took %v: it slept to the spin hold's lease", d)
	}
	h.unlock()
}
