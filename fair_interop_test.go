package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedissonFairContention: Redisson threads (lock(), watchdog, unlock
// with its latch, deadlines on their own clock) and dlock Clients share
// one fair lock's queue: every critical section runs alone, some
// outlasting both sides' lease, one Java thread and one dlock goroutine
// give up their waits (acquireFailed, abandon) again and again, and nobody
// is left in the queue.
func TestRedissonFairContention(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	const rounds = 8
	var s section
	var gaveUp atomic.Int64
	var wg sync.WaitGroup
	for j := range 2 {
		jl := newJVM(t, 900*time.Millisecond).lock(javaFairLock, name)
		for tid := 1; tid <= 2; tid++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					var stop func()
					if j == 1 && tid == 2 {
						// tryLock(50 ms) until it succeeds: a give-up
						// (acquireFailed) after each failed try.
						for {
							ok, err := jl.tryLock(ctx, tid, 50*time.Millisecond, nil)
							if err != nil {
								t.Error(err)
								return
							}
							if ok {
								break
							}
							gaveUp.Add(1)
						}
						stop = jl.watchdog(tid)
					} else {
						var err error
						if stop, err = jl.lockWithWatchdog(ctx, tid, nil); err != nil {
							t.Error(err)
							return
						}
					}
					s.run(pause(j == 0 && tid == 1 && i == 3))
					jl.release(t, ctx, tid, stop)
				}
			}()
		}
	}
	for g := range 2 {
		m := mustFair(t, newClient(t, nil, WithWatchdogTimeout(900*time.Millisecond)), name)
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					var l context.Context
					for {
						// One goroutine gives up after 50 ms and tries again.
						lctx, cancel := ctx, context.CancelFunc(func() {})
						if g == 1 && k == 1 {
							lctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
						}
						lc, err := m.Lock(lctx)
						cancel()
						if err == nil {
							l = lc
							break
						}
						if !errors.Is(err, ErrNotObtained) || lctx == ctx {
							t.Error(err)
							return
						}
						gaveUp.Add(1)
					}
					s.run(pause(g == 0 && k == 0 && i == 5))
					if err := m.Unlock(l); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, 3*time.Minute, "the contending Java threads and dlock goroutines")
	s.check(t, 8*rounds)
	t.Logf("%d waits given up and tried again", gaveUp.Load())
	rdb := newRedis(t)
	if q := fairQueue(t, rdb, name); len(q) != 0 {
		t.Errorf("queue left: %v", q)
	}
}

// TestRedissonFairWakeUp: a Redisson unlock wakes the dlock waiter at the
// head of the queue at once, and a dlock unlock the Redisson one.
func TestRedissonFairWakeUp(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	jl := newJVM(t, 30*time.Second).lock(javaFairLock, name)
	gc := newClient(t, nil)
	m := mustFair(t, gc, name)
	var toGo, toJava latencies
	for range 5 {
		if ok, _, err := jl.attempt(ctx, 1, jl.jvm.lease, jl.wait); !ok || err != nil {
			t.Fatalf("java lock: %v %v", ok, err)
		}
		got := goWaiter(ctx, m)
		toGo.add(timeWakeUp(t, got, func() { waitForQueue(t, gc.rdb, name, 1); waitForFairSubscriber(t, gc, name) }, func() {
			if n, err := jl.unlock(ctx, 1); n != 1 || err != nil {
				t.Errorf("java unlock: %d %v", n, err)
			}
		}))

		l := mustLock(t, ctx, m)
		jgot, ready := javaLockWaiter(ctx, jl, 2)
		toJava.add(timeWakeUp(t, jgot, func() { recv(t, ready, 10*time.Second, "the Java waiter's subscription") }, func() {
			if err := m.Unlock(l); err != nil {
				t.Error(err)
			}
		}))
	}
	toGo.check(t, "Java unlock -> dlock waiter", wakeUpMedian)
	toJava.check(t, "dlock unlock -> Java waiter", wakeUpMedian)
}

// waitForFairSubscriber waits until a waiter of c is subscribed to its
// own channel of the fair lock name.
func waitForFairSubscriber(t testing.TB, c *Client, name string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		for _, owner := range fairQueue(t, c.rdb, name) {
			ch := prefixName(channelPrefix, name) + ":" + owner
			if c.hub.Waiters(ch) > 0 && c.rdb.PubSubNumSub(context.Background(), ch).Val()[ch] > 0 {
				return nil
			}
		}
		return errors.New("no subscribed waiter yet")
	})
}

// TestFairJavaWaiterKeepsPlace (reference §8.2): a Redisson waiter whose
// deadline, on its own clock and with its own short wait, passes while
// the lock is held drops itself from the head and joins again at the
// tail. A dlock waiter behind it keeps the queue's deadlines ahead of the
// lock's expiry while the lock is held, so the Java waiter keeps its
// place and is served first.
func TestFairJavaWaiterKeepsPlace(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	holder := mustFair(t, newClient(t, nil, WithWatchdogTimeout(600*time.Millisecond)), name)
	held := mustLock(t, ctx, holder)

	jl := newJVM(t, 30*time.Second).lock(javaFairLock, name)
	jl.wait = 500 * time.Millisecond // fairLockWaitTimeout
	var (
		mu    sync.Mutex
		order []string
	)
	record := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	jgot, ready := javaLockWaiter(ctx, jl, 1)
	recv(t, ready, 10*time.Second, "the Java waiter's subscription")
	gc := newClient(t, nil)
	m := mustFair(t, gc, name)
	got := goWaiter(ctx, m)
	waitForQueue(t, gc.rdb, name, 2)

	// Well past the Java waiter's deadline as Redisson computed it.
	time.Sleep(2500 * time.Millisecond)
	if q := fairQueue(t, gc.rdb, name); len(q) != 2 || q[0] != jl.owner(1) {
		t.Errorf("queue %v while held, want the Java waiter %s first", q, jl.owner(1))
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case h := <-jgot:
			if h.err != nil {
				t.Fatal(h.err)
			}
			record("java")
			h.unlock()
		case h := <-got:
			if h.err != nil {
				t.Fatal(h.err)
			}
			record("go")
			h.unlock()
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter was not served")
		}
	}
	if want := []string{"java", "go"}; !slices.Equal(order, want) {
		t.Errorf("grant order %v, want %v", order, want)
	}
}

// TestFairJavaHeadGivesUp (reference §8.3): the head of the queue is a
// Redisson waiter; the holder's unlock wakes it, and it gives up right
// then (tryLock's waitTime ran out), which tells nobody. The dlock waiter
// now at the head of a free lock finds out within fairHeadCheck, not at
// the end of the old holder's 30 s lease.
func TestFairJavaHeadGivesUp(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	hl := newJVM(t, 30*time.Second).lock(javaFairLock, name)
	if ok, _, err := hl.attempt(ctx, 1, hl.jvm.lease, hl.wait); !ok || err != nil {
		t.Fatalf("java lock: %v %v", ok, err)
	}
	const wait = 10 * time.Second // the Java waiter's tryLock waitTime
	jl := newJVM(t, 30*time.Second).lock(javaFairLock, name)
	if ok, _, err := jl.attempt(ctx, 1, jl.jvm.lease, wait); ok || err != nil {
		t.Fatalf("java waiter: %v %v", ok, err)
	}
	gc := newClient(t, nil)
	m := mustFair(t, gc, name)
	got := goWaiter(ctx, m)
	waitForQueue(t, gc.rdb, name, 2)
	waitForFairSubscriber(t, gc, name)

	start := time.Now()
	if n, err := hl.unlock(ctx, 1); n != 1 || err != nil {
		t.Fatalf("java unlock: %d %v", n, err)
	}
	if err := jl.abandon(ctx, 1, wait); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h.err != nil {
			t.Fatal(h.err)
		}
		t.Logf("the dlock waiter took the free lock %v after the unlock", h.at.Sub(start))
		if d := h.at.Sub(start); d > fairHeadCheck+2*time.Second {
			t.Errorf("took %v, want about fairHeadCheck (%v)", d, fairHeadCheck)
		}
		h.unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("the dlock waiter slept on a free lock")
	}
}

// TestFairJavaHeadMissedMessage: the lock is free and a Redisson head
// sleeps (its message was lost); a dlock waiter behind it, looking again,
// tells the head again rather than wait out the head's deadline, and the
// queue moves on in order.
func TestFairJavaHeadMissedMessage(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	gc := newClient(t, nil)
	holder := mustFair(t, gc, name, WithLease(30*time.Second))
	held := mustLock(t, ctx, holder)
	jl := newJVM(t, 30*time.Second).lock(javaFairLock, name)
	jgot, ready := javaLockWaiter(ctx, jl, 1)
	recv(t, ready, 10*time.Second, "the Java waiter's subscription")
	m := mustFair(t, newClient(t, nil), name)
	got := goWaiter(ctx, m)
	waitForQueue(t, gc.rdb, name, 2)
	// The lock goes without a message (an operator's DEL), as if the
	// unlock message to the Java head had been lost.
	start := time.Now()
	gc.rdb.Del(ctx, name)
	select {
	case h := <-jgot:
		if h.err != nil {
			t.Fatal(h.err)
		}
		t.Logf("the Java head took the lock %v after it was freed", h.at.Sub(start))
		h.unlock()
	case h := <-got:
		t.Fatalf("the dlock waiter overtook the Java head (%v)", h.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the Java head was not woken")
	}
	select {
	case h := <-got:
		if h.err != nil {
			t.Fatal(h.err)
		}
		h.unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("the dlock waiter was not served after the Java head")
	}
	_ = holder.Unlock(held)
}

// TestFairJavaWaiterAmongDlockGrants: a Java waiter queued between dlock
// waiters keeps its place while dlock waiters ahead of it take the lock,
// which moves only the new head's deadline (promote in fair_queue.lua):
// when it becomes the head, its deadline is one wait past the new hold,
// not the later one it joined with; it is served in its turn, and the
// dlock waiter behind it after it.
func TestFairJavaWaiterAmongDlockGrants(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	hc := newClient(t, nil)
	holder := mustFair(t, hc, name)
	held := mustLock(t, ctx, holder)
	gc := newClient(t, nil)
	m := mustFair(t, gc, name)
	got1 := lockAsync(ctx, m)
	waitForQueue(t, gc.rdb, name, 1)
	got2 := lockAsync(ctx, m)
	waitForQueue(t, gc.rdb, name, 2)
	jl := newJVM(t, 30*time.Second).lock(javaFairLock, name)
	jgot, ready := javaLockWaiter(ctx, jl, 1)
	recv(t, ready, 10*time.Second, "the Java waiter's subscription")
	q := waitForQueue(t, gc.rdb, name, 3)
	if q[2] != jl.owner(1) {
		t.Fatalf("queue %v, want the Java waiter third", q)
	}
	got3 := lockAsync(ctx, m)
	waitForQueue(t, gc.rdb, name, 4)
	joined, _ := fairDeadline(t, gc.rdb, name, jl.owner(1))

	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	h1 := await(t, got1, 10*time.Second, "first dlock waiter")
	if d, _ := fairDeadline(t, gc.rdb, name, jl.owner(1)); d != joined {
		t.Errorf("the Java waiter's deadline moved from %d to %d at a grant that left it second", joined, d)
	}
	if err := m.Unlock(h1); err != nil {
		t.Fatal(err)
	}
	h2 := await(t, got2, 10*time.Second, "second dlock waiter")
	// The Java waiter is the head now: one wait past the new hold.
	pttl, err := gc.rdb.PTTL(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := time.Now().UnixMilli() + pttl.Milliseconds() + DefaultFairWaitTimeout.Milliseconds()
	if d, _ := fairDeadline(t, gc.rdb, name, jl.owner(1)); d < want-60_000 || d > want+5_000 {
		t.Errorf("the Java head's deadline is %d ms from now, want one wait past the hold (%d)",
			d-time.Now().UnixMilli(), want-time.Now().UnixMilli())
	}
	if q := fairQueue(t, gc.rdb, name); len(q) != 2 || q[0] != jl.owner(1) {
		t.Errorf("queue %v, want the Java waiter at the head", q)
	}
	if err := m.Unlock(h2); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-jgot:
		if h.err != nil {
			t.Fatal(h.err)
		}
		h.unlock()
	case h := <-got3:
		t.Fatalf("the dlock waiter behind the Java waiter was served first (err %v)", h.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the Java waiter was not served")
	}
	if err := m.Unlock(await(t, got3, 10*time.Second, "last dlock waiter")); err != nil {
		t.Fatal(err)
	}
}
