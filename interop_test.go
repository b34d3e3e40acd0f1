package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// held is what a waiter started by a wake-up test reports: when it got
// the lock and how to give it back.
type held struct {
	at     time.Time
	unlock func()
	err    error
}

// goWaiter starts a dlock Lock on l and reports on the channel.
func goWaiter(ctx context.Context, l interface {
	Lock(context.Context) (context.Context, error)
	Unlock(context.Context) error
}) <-chan held {
	got := make(chan held, 1)
	go func() {
		lc, err := l.Lock(ctx)
		got <- held{at: time.Now(), err: err, unlock: func() { _ = l.Unlock(lc) }}
	}()
	return got
}

// javaLockWaiter starts thread tid of l in lock() and reports on the channel;
// ready is closed once the thread is subscribed.
func javaLockWaiter(ctx context.Context, l *javaLock, tid int) (<-chan held, <-chan struct{}) {
	got := make(chan held, 1)
	ready := make(chan struct{})
	go func() {
		_, err := l.tryLock(ctx, tid, -1, func() { close(ready) })
		got <- held{at: time.Now(), err: err, unlock: func() { _, _ = l.unlock(ctx, tid) }}
	}()
	return got, ready
}

// timeWakeUp releases the lock once the waiter sleeps on it (waitReady
// returned) and returns how long after the release began the waiter held
// it. The waiter then gives it back.
func timeWakeUp(t *testing.T, got <-chan held, waitReady func(), release func()) time.Duration {
	t.Helper()
	waitReady()
	select {
	case h := <-got:
		t.Fatalf("the waiter got the lock while it was held (%v)", h.err)
	default:
	}
	start := time.Now()
	release()
	select {
	case h := <-got:
		if h.err != nil {
			t.Fatal(h.err)
		}
		h.unlock()
		return h.at.Sub(start)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	return 0
}

// wakeUpMedian is the median wake-up the interop tests accept: a message
// and one attempt, with room for a loaded machine. A lost message would
// cost the holder's 30 s lease.
const wakeUpMedian = 250 * time.Millisecond

// TestRedissonLockContention: Redisson clients (lock(), watchdog, unlock
// with its latch) and dlock Clients take one Mutex in turns, some holding
// it past both sides' lease so that only renewal keeps it: every critical
// section runs alone.
func TestRedissonLockContention(t *testing.T) {
	ctx := boundedCtx(t, 2*time.Minute)
	name := lockName(t)
	const rounds = 12
	var s section
	var wg sync.WaitGroup
	for j := range 2 {
		jl := newJVM(t, 900*time.Millisecond).lock(javaRLock, name)
		for tid := 1; tid <= 2; tid++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					stop, err := jl.lockWithWatchdog(ctx, tid, nil)
					if err != nil {
						t.Error(err)
						return
					}
					s.run(pause(j == 0 && tid == 1 && i == 3))
					jl.release(t, ctx, tid, stop)
				}
			}()
		}
	}
	for g := range 2 {
		m := mustMutex(t, newClient(t, nil, WithWatchdogTimeout(900*time.Millisecond)), name)
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					l, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					s.run(pause(g == 0 && k == 0 && i == 5))
					if err := m.Unlock(l); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, 2*time.Minute, "the Redisson and dlock lockers")
	s.check(t, 8*rounds)
}

// pause is a critical section's length: long ones outlast the 900 ms
// leases of the contention tests.
func pause(long bool) time.Duration {
	if long {
		return 1500 * time.Millisecond
	}
	return 200 * time.Microsecond
}

// TestRedissonLockWakeUp: a Redisson unlock wakes a dlock waiter at once,
// and a dlock unlock a Redisson waiter; neither waits for the lease.
func TestRedissonLockWakeUp(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	jl := newJVM(t, 30*time.Second).lock(javaRLock, name)
	gc := newClient(t, nil)
	m := mustMutex(t, gc, name)
	var toGo, toJava latencies
	for range 5 {
		if ok, _, err := jl.attempt(ctx, 1, jl.jvm.lease, 0); !ok || err != nil {
			t.Fatalf("java lock: %v %v", ok, err)
		}
		if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("dlock TryLock while Java holds: %v", err)
		}
		toGo.add(timeWakeUp(t, goWaiter(ctx, m), func() { waitForWaiter(t, gc, name) }, func() {
			if n, err := jl.unlock(ctx, 1); n != 1 || err != nil {
				t.Errorf("java unlock: %d %v", n, err)
			}
		}))

		l := mustLock(t, ctx, m)
		if ok, pttl, err := jl.attempt(ctx, 2, jl.jvm.lease, 0); ok || err != nil || pttl <= 0 {
			t.Fatalf("java lock while dlock holds: %v %d %v", ok, pttl, err)
		}
		got, ready := javaLockWaiter(ctx, jl, 2)
		toJava.add(timeWakeUp(t, got, func() { recv(t, ready, 10*time.Second, "the Java waiter's first attempt") }, func() {
			if err := m.Unlock(l); err != nil {
				t.Error(err)
			}
		}))
	}
	toGo.check(t, "Java unlock -> dlock waiter", wakeUpMedian)
	toJava.check(t, "dlock unlock -> Java waiter", wakeUpMedian)
}
