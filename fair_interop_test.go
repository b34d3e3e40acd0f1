package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's current fair lock scripts, written from the reference's
// description (redisson.md §2, "Fair lock acquire/unlock"): the deadlines
// use the Java client's clock, passed as an argument, the purge drops any
// stale head, and a queued waiter that cannot take the lock is told the
// lock's pttl (0 when free).
var (
	javaFairAcquire = redis.NewScript(`
-- KEYS: lock, queue, timeouts. ARGV: lease, owner, wait, now.
local now = tonumber(ARGV[4])
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if head == false then break end
  local timeout = tonumber(redis.call('zscore', KEYS[3], head))
  if timeout <= now then
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
  else
    break
  end
end
if redis.call('exists', KEYS[1]) == 0 and
    (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  local waiting = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #waiting do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), waiting[i])
  end
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]))
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] then
  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl`)
	javaFairUnlock = redis.NewScript(`
-- KEYS: lock, queue, timeouts, channel. ARGV: message, lease, owner, now.
local now = tonumber(ARGV[4])
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if head == false then break end
  local timeout = tonumber(redis.call('zscore', KEYS[3], head))
  if timeout <= now then
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
  else
    break
  end
end
if redis.call('exists', KEYS[1]) == 0 then
  local next = redis.call('lindex', KEYS[2], 0)
  if next ~= false then redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1]) end
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next ~= false then redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1]) end
return 1`)
)

// javaFair plays one thread of a Redisson client on a fair lock.
type javaFair struct {
	rdb   *redis.Client
	name  string
	owner string
	wait  time.Duration
}

func (j javaFair) keys() []string {
	return []string{j.name, "redisson_lock_queue:{" + j.name + "}", "redisson_lock_timeout:{" + j.name + "}"}
}

func (j javaFair) channel() string { return "redisson_lock__channel:{" + j.name + "}:" + j.owner }

func (j javaFair) tryAcquire(ctx context.Context) (bool, int64, error) {
	return javaResult(javaFairAcquire.Run(ctx, j.rdb, j.keys(), 30000, j.owner, j.wait.Milliseconds(), time.Now().UnixMilli()))
}

func (j javaFair) unlock(ctx context.Context) error {
	keys := append(j.keys(), "redisson_lock__channel:{"+j.name+"}")
	return javaFairUnlock.Run(ctx, j.rdb, keys, 0, 30000, j.owner, time.Now().UnixMilli()).Err()
}

// lock is RedissonLock.lock's loop: try (which queues), subscribe to the
// thread's own channel, then try again after each message or when the
// returned ttl runs out. Before each attempt after a wake-up it calls
// woken, which may stall it like a slow JVM.
func (j javaFair) lock(ctx context.Context, woken func()) error {
	ok, ttl, err := j.tryAcquire(ctx)
	if ok || err != nil {
		return err
	}
	ps := j.rdb.Subscribe(ctx, j.channel())
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return err
	}
	msgs := ps.Channel()
	for {
		if ok, ttl, err = j.tryAcquire(ctx); ok || err != nil {
			return err
		}
		select {
		case <-msgs:
			woken()
		case <-time.After(time.Duration(ttl) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestFairJavaWaiterNotStarved: a Java client running Redisson's fair lock
// scripts queues between Go waiters and is served in its turn: woken by
// the Go unlock, not overtaken by Go while it is slow to come, and its own
// unlock wakes the next Go waiter.
func TestFairJavaWaiterNotStarved(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	cs := []*Client{newClient(t, nil), newClient(t, nil)}
	holder := mustFair(t, cs[0], name)
	held := mustLock(t, ctx, holder)

	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	record := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	serve := func(who string, m *FairMutex, got <-chan context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l := <-got; l != nil {
				record(who)
				if err := m.Unlock(l); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	g1 := mustFair(t, cs[1], name)
	_, got1 := fairWaiter(t, ctx, g1, 1)
	serve("go1", g1, got1)

	java := javaFair{rdb: newRedis(t), name: name, owner: "5f0b1c2e-8d3a-4e8b-9a51-3c1d2e4f5a6b:1", wait: DefaultFairWaitTimeout}
	wokenJava := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := java.lock(ctx, func() {
			once.Do(func() {
				close(wokenJava)
				<-proceed
			})
		})
		if err != nil {
			t.Error(err)
			return
		}
		record("java")
		if err := java.unlock(ctx); err != nil {
			t.Error(err)
		}
	}()
	waitForQueue(t, cs[0].rdb, name, 2)
	eventually(t, 5*time.Second, func() error {
		if n := cs[0].rdb.PubSubNumSub(ctx, java.channel()).Val()[java.channel()]; n != 1 {
			return errors.New("java waiter not subscribed yet")
		}
		return nil
	})

	g2 := mustFair(t, cs[0], name)
	_, got2 := fairWaiter(t, ctx, g2, 3)
	serve("go2", g2, got2)

	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	// go1 takes the lock and releases it, which wakes the Java waiter; while
	// Java is slow to come, the lock is free but Go cannot take it.
	select {
	case <-wokenJava:
	case <-time.After(10 * time.Second):
		t.Fatal("the Java waiter was not woken")
	}
	if locked, _ := g2.IsLocked(ctx); locked {
		t.Fatal("lock held while the Java waiter is the head")
	}
	if _, err := g2.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("Go TryLock while a Java waiter is the head: %v, want ErrNotObtained", err)
	}
	close(proceed)
	wg.Wait()
	if want := []string{"go1", "java", "go2"}; !slices.Equal(order, want) {
		t.Errorf("grant order %v, want %v", order, want)
	}
	if q := fairQueue(t, cs[0].rdb, name); len(q) != 0 {
		t.Errorf("queue left: %v", q)
	}
}
