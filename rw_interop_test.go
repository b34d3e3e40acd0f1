package dlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rwSection is a critical section for a read-write lock: writers run
// section's lossy increment alone, readers only check that no writer is
// inside.
type rwSection struct {
	section
	readers atomic.Int64
	reads   atomic.Int64
}

func (s *rwSection) write(pause time.Duration) {
	if s.readers.Load() != 0 {
		s.overlap.Add(1)
	}
	s.run(pause)
}

func (s *rwSection) read(pause time.Duration) {
	s.readers.Add(1)
	if s.inside.Load() != 0 {
		s.overlap.Add(1)
	}
	time.Sleep(pause)
	if s.inside.Load() != 0 {
		s.overlap.Add(1)
	}
	s.readers.Add(-1)
	s.reads.Add(1)
}

// TestRedissonRWContention: Redisson readers and writers (lock(), their
// watchdogs, unlock with its latch) and dlock ones share one read-write
// lock: writers run alone, readers never beside a writer, and some read
// and write holds on each side outlast both sides' lease, so that only
// renewal (Redisson's LockTask and ReadLockTask, dlock's watchdog) keeps
// them.
func TestRedissonRWContention(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	const rounds = 10
	var s rwSection
	var wg sync.WaitGroup
	for j := range 2 {
		jvm := newJVM(t, 900*time.Millisecond)
		for _, kind := range []javaKind{javaWriteLock, javaReadLock} {
			jl := jvm.lock(kind, name)
			tid := int(kind)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					stop, err := jl.lockWithWatchdog(ctx, tid, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if kind == javaWriteLock {
						s.write(pause(j == 0 && i == 3))
					} else {
						s.read(pause(j == 1 && i == 2))
					}
					jl.release(t, ctx, tid, stop)
				}
			}()
		}
	}
	for g := range 2 {
		rw := mustRW(t, newClient(t, nil, WithWatchdogTimeout(900*time.Millisecond)), name)
		for _, write := range []bool{true, false} {
			var l Locker = rw.ReadLock()
			if write {
				l = rw.WriteLock()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					lc, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if write {
						s.write(pause(g == 0 && i == 5))
					} else {
						s.read(pause(g == 1 && i == 4))
					}
					if err := l.Unlock(lc); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, 3*time.Minute, "the contending Java threads and dlock goroutines")
	s.check(t, 4*rounds)
	if n := s.reads.Load(); n != 4*rounds {
		t.Errorf("%d reads, want %d", n, 4*rounds)
	}
}

// TestRedissonRWWakeUp: each side's unlock wakes the other side's waiters
// at once: a Redisson write unlock ("1") a dlock writer and a dlock
// reader, a Redisson read unlock ("0") a dlock writer, and dlock's write
// unlock a Redisson reader.
func TestRedissonRWWakeUp(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	jvm := newJVM(t, 30*time.Second)
	jw, jr := jvm.lock(javaWriteLock, name), jvm.lock(javaReadLock, name)
	gc := newClient(t, nil)
	rw := mustRW(t, gc, name)
	ch := prefixName(rwChannelPrefix, name)
	var fromJava, toJava latencies
	for range 4 {
		for _, l := range []Locker{rw.WriteLock(), rw.ReadLock()} {
			if ok, _, err := jw.attempt(ctx, 1, jvm.lease, 0); !ok || err != nil {
				t.Fatalf("java write lock: %v %v", ok, err)
			}
			fromJava.add(timeWakeUp(t, goWaiter(ctx, l), func() { waitForSubscriber(t, gc, ch) }, func() {
				if n, err := jw.unlock(ctx, 1); n != 1 || err != nil {
					t.Errorf("java write unlock: %d %v", n, err)
				}
			}))
		}
		if ok, _, err := jr.attempt(ctx, 2, jvm.lease, 0); !ok || err != nil {
			t.Fatalf("java read lock: %v %v", ok, err)
		}
		fromJava.add(timeWakeUp(t, goWaiter(ctx, rw.WriteLock()), func() { waitForSubscriber(t, gc, ch) }, func() {
			if n, err := jr.unlock(ctx, 2); n != 1 || err != nil {
				t.Errorf("java read unlock: %d %v", n, err)
			}
		}))

		l := mustLock(t, ctx, rw.WriteLock())
		got, ready := javaLockWaiter(ctx, jr, 3)
		toJava.add(timeWakeUp(t, got, func() { recv(t, ready, 10*time.Second, "the Java reader's subscription") }, func() {
			if err := rw.WriteLock().Unlock(l); err != nil {
				t.Error(err)
			}
		}))
	}
	fromJava.check(t, "Java unlock -> dlock waiter", wakeUpMedian)
	toJava.check(t, "dlock unlock -> Java waiter", wakeUpMedian)
}

// TestRWJavaSilentDowngrade (reference §8.4): a Redisson writer that also
// holds a read lock releases its write lock; Redisson publishes nothing
// then, though readers may enter. A dlock reader waiting meanwhile gets
// in within downgradePoll, not at the end of the writer's 30 s lease.
func TestRWJavaSilentDowngrade(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	jvm := newJVM(t, 30*time.Second)
	jw, jr := jvm.lock(javaWriteLock, name), jvm.lock(javaReadLock, name)
	if ok, _, err := jw.attempt(ctx, 1, jvm.lease, 0); !ok || err != nil {
		t.Fatalf("java write lock: %v %v", ok, err)
	}
	if ok, _, err := jr.attempt(ctx, 1, jvm.lease, 0); !ok || err != nil {
		t.Fatalf("java read lock under its write lock: %v %v", ok, err)
	}
	gc := newClient(t, nil)
	rw := mustRW(t, gc, name)
	got := goWaiter(ctx, rw.ReadLock())
	waitForSubscriber(t, gc, prefixName(rwChannelPrefix, name))
	start := time.Now()
	if n, err := jw.unlock(ctx, 1); n != 1 || err != nil {
		t.Fatalf("java write unlock: %d %v", n, err)
	}
	select {
	case h := <-got:
		if h.err != nil {
			t.Fatal(h.err)
		}
		t.Logf("the dlock reader entered %v after the silent downgrade", h.at.Sub(start))
		h.unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("the dlock reader slept through the downgrade")
	}
	if n, err := jr.unlock(ctx, 1); n != 1 || err != nil {
		t.Fatalf("java read unlock: %d %v", n, err)
	}
}

// TestRWForceUnlockMessages (reference §8.4): as in Redisson, a read
// ForceUnlock publishes "0" (only writers wait for a read-held lock; one
// may enter) and a write ForceUnlock "1" (every waiting reader may enter).
func TestRWForceUnlockMessages(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	rdb := newRedis(t)
	ps := rdb.Subscribe(ctx, prefixName(rwChannelPrefix, name))
	defer ps.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := ps.Receive(sctx); err != nil { // the SUBSCRIBE's confirmation
		t.Fatal(err)
	}
	rw := mustRW(t, newClient(t, nil), name)
	for _, c := range []struct {
		l interface {
			ForceUnlock(context.Context) (bool, error)
		}
		lock Locker
		want string
	}{{rw.ReadLock(), rw.ReadLock(), unlockMessage}, {rw.WriteLock(), rw.WriteLock(), readUnlockMessage}} {
		lc := mustLock(t, ctx, c.lock)
		if ok, err := c.l.ForceUnlock(ctx); !ok || err != nil {
			t.Fatalf("ForceUnlock: %v %v", ok, err)
		}
		select {
		case msg := <-ps.Channel():
			if msg.Payload != c.want {
				t.Errorf("%T ForceUnlock published %q, want %q", c.lock, msg.Payload, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no message")
		}
		_ = lc // lost: the Client notices at its next renewal
	}
}
