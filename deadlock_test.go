package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// crossWait is the classic deadlock: owner a holds l1 and waits for l2,
// owner b holds l2 and waits for l1, a starting to wait first. It returns
// the results of a's and b's waits.
type crossWait struct {
	l1a, l2a, l1b, l2b *Mutex // l1 and l2 through a's Client and b's
	a, b               context.Context
	aDone, bDone       chan error
}

func startCrossWait(t *testing.T, ca, cb *Client) *crossWait {
	t.Helper()
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	x := &crossWait{
		l1a: mustMutex(t, ca, name+":1"), l2a: mustMutex(t, ca, name+":2"),
		l1b: mustMutex(t, cb, name+":1"), l2b: mustMutex(t, cb, name+":2"),
		aDone: make(chan error, 1), bDone: make(chan error, 1),
	}
	x.a = mustLock(t, ctx, x.l1a)
	x.b = mustLock(t, ctx, x.l2b)
	waitFor := func(m *Mutex, held context.Context, done chan<- error) {
		go func() {
			lctx, err := m.Lock(held)
			if err == nil {
				err = m.Unlock(lctx)
			}
			done <- err
		}()
	}
	waitFor(x.l2a, x.a, x.aDone)
	eventually(t, 10*time.Second, func() error { // a's wait is recorded
		if n := len(ca.waits.snapshot()); n != 1 {
			return fmt.Errorf("%d waits of a recorded", n)
		}
		return nil
	})
	waitFor(x.l1b, x.b, x.bDone)
	return x
}

// TestDeadlockReported: the cycle of two owners on two Clients is
// reported by Deadlocks (on a third Client, without the option) within
// moments, with the locks, owners, holder records and the youngest first.
func TestDeadlockReported(t *testing.T) {
	ca := newClient(t, nil, WithDeadlockDetection(0), WithClientName("a"))
	cb := newClient(t, nil, WithDeadlockDetection(0), WithClientName("b"))
	x := startCrossWait(t, ca, cb)
	ownerA, _ := ca.Owner(x.a)
	ownerB, _ := cb.Owner(x.b)
	var found []Deadlock
	eventually(t, 10*time.Second, func() error {
		var err error
		found, err = newClient(t, nil).Deadlocks(t.Context())
		if err == nil && len(found) != 1 {
			err = fmt.Errorf("deadlocks %+v, want 1", found)
		}
		return err
	})
	w := found[0].Waits
	if len(w) != 2 || w[0].Owner != ownerB || w[0].Lock != x.l1a.Name() || w[1].Owner != ownerA || w[1].Lock != x.l2a.Name() ||
		w[0].Kind != KindMutex || w[0].Holder.PID != os.Getpid() || w[0].Holder.Name != "b" || w[1].Holder.Name != "a" ||
		!w[0].Since.After(w[1].Since) && !w[0].Since.Equal(w[1].Since) {
		t.Errorf("cycle %+v, want b waiting for l1 (youngest first), a for l2", w)
	}
	// Record only: nobody backs off. Broken by hand: b lets go of l2,
	// which ends its lock context and so its wait; a gets l2.
	select {
	case err := <-x.bDone:
		t.Fatalf("b's wait ended without the option to break it: %v", err)
	default:
	}
	if err := x.l2b.Unlock(x.b); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, x.bDone, 10*time.Second, "b's wait"); errors.Is(err, ErrDeadlock) || !errors.Is(err, context.Canceled) {
		t.Errorf("b's Lock: %v, want its context's end", err)
	}
	if err := recv(t, x.aDone, 10*time.Second, "a's wait"); err != nil {
		t.Error(err)
	}
	if err := x.l1a.Unlock(x.a); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		for _, c := range []*Client{ca, cb} {
			if exists(t, c.rdb, layout.WaitsPrefix+c.id) {
				return fmt.Errorf("wait record of %s still there", c.id)
			}
		}
		return nil
	})
}

// TestDeadlockBroken: with a check interval, the youngest waiter of the
// cycle (b, which started waiting last) fails with ErrDeadlock within a
// few intervals, an error that is neither context.Canceled nor
// DeadlineExceeded; a, the other, gets its lock once b let go.
func TestDeadlockBroken(t *testing.T) {
	const every = 100 * time.Millisecond
	ca := newClient(t, nil, WithDeadlockDetection(every))
	cb := newClient(t, nil, WithDeadlockDetection(every))
	start := time.Now()
	x := startCrossWait(t, ca, cb)
	err := recv(t, x.bDone, 10*time.Second, "b failing in the deadlock")
	if !errors.Is(err, ErrDeadlock) || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("b's Lock: %v, want ErrDeadlock and ErrNotObtained", err)
	}
	// No ctx of b ended: the error must not say so (ErrDeadlock's contract).
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || x.b.Err() != nil {
		t.Errorf("b's Lock: %v: claims a context ended (b's lock context: %v)", err, x.b.Err())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("broken after %v, check interval %v", d, every)
	}
	select {
	case err := <-x.aDone:
		t.Fatalf("a's wait ended (%v) while b still held l2", err)
	default:
	}
	if err := x.l2b.Unlock(x.b); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, x.aDone, 10*time.Second, "a's wait once b let go"); err != nil {
		t.Errorf("a's Lock: %v", err)
	}
	if err := x.l1a.Unlock(x.a); err != nil {
		t.Fatal(err)
	}
}

// TestDeadlockWriteLocks: the cross wait on two RWMutexes' write locks is
// a cycle too. A write hold's field in the lock hash is "<owner>:write":
// read as an owner of its own, nobody would wait for it, and the cycle
// would go unseen.
func TestDeadlockWriteLocks(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	ca := newClient(t, nil, WithDeadlockDetection(0))
	cb := newClient(t, nil, WithDeadlockDetection(0))
	name := lockName(t)
	write := func(c *Client, name string) *WriteLock {
		rw, err := c.NewRWMutex(name)
		if err != nil {
			t.Fatal(err)
		}
		return rw.WriteLock()
	}
	l1a, l2a := write(ca, name+":1"), write(ca, name+":2")
	l1b, l2b := write(cb, name+":1"), write(cb, name+":2")
	a, b := mustLock(t, ctx, l1a), mustLock(t, ctx, l2b)
	t.Cleanup(func() { _, _ = l2b.Unlock(b), l1a.Unlock(a) }) // ends the waits of a failed test
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	waitFor := func(l *WriteLock, held context.Context, done chan<- error) {
		go func() {
			lctx, err := l.Lock(held)
			if err == nil {
				err = l.Unlock(lctx)
			}
			done <- err
		}()
	}
	waitFor(l2a, a, aDone)
	waitFor(l1b, b, bDone)
	ownerA, _ := ca.Owner(a)
	ownerB, _ := cb.Owner(b)
	var found []Deadlock
	eventually(t, 10*time.Second, func() error {
		var err error
		found, err = newClient(t, nil).Deadlocks(ctx)
		if err == nil && len(found) != 1 {
			err = fmt.Errorf("deadlocks %+v, want the cycle of two write locks (fields of the write holds: %v, %v)",
				found, ca.rdb.HKeys(ctx, l1a.Name()).Val(), ca.rdb.HKeys(ctx, l2a.Name()).Val())
		}
		return err
	})
	waiting := map[string]string{}
	for _, w := range found[0].Waits {
		waiting[w.Owner] = w.Lock
		if w.Kind != KindWrite {
			t.Errorf("wait %+v: kind %q, want %q", w, w.Kind, KindWrite)
		}
	}
	if len(waiting) != 2 || waiting[ownerA] != l2a.Name() || waiting[ownerB] != l1b.Name() {
		t.Errorf("cycle %+v, want %s waiting for %s and %s for %s", found[0].Waits, ownerA, l2a.Name(), ownerB, l1b.Name())
	}
	// Broken by hand: b lets go of l2, which ends its wait; a gets l2.
	if err := l2b.Unlock(b); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, bDone, 10*time.Second, "b's wait"); !errors.Is(err, context.Canceled) {
		t.Errorf("b's Lock: %v, want its context's end", err)
	}
	if err := recv(t, aDone, 10*time.Second, "a's wait once b let go"); err != nil {
		t.Error(err)
	}
	if err := l1a.Unlock(a); err != nil {
		t.Fatal(err)
	}
}

// TestDeadlockConfirmedBeforeActing: a cycle is acted on only when two
// checks in a row find it. At its first sighting it may be a wait that
// has just ended, its record not yet removed (a false positive), so no
// Lock fails; at the second the youngest waiter does. The checks are run
// by hand (record-only Clients), one at a time, so that the test counts
// checks, not time.
func TestDeadlockConfirmedBeforeActing(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	// The context of each Client's sleeping Lock, derived from the one the
	// check cancels: its end is the check's doing, seen at once.
	waitCtx := func(lock string) (Option, chan context.Context) {
		ch := make(chan context.Context, 1)
		return WithObserver(Observer{Wait: func(ctx context.Context, l LockInfo, w WaitInfo) {
			if w.Round == 1 && l.Name == lock {
				select {
				case ch <- ctx:
				default:
				}
			}
		}}), ch
	}
	obsA, aWaitCh := waitCtx(name + ":2")
	obsB, bWaitCh := waitCtx(name + ":1")
	ca := newClient(t, nil, WithDeadlockDetection(0), obsA)
	cb := newClient(t, nil, WithDeadlockDetection(0), obsB)
	x := startCrossWait(t, ca, cb)
	t.Cleanup(func() { _, _ = x.l2b.Unlock(x.b), x.l1a.Unlock(x.a) }) // ends the waits of a failed test
	aWait := recv(t, aWaitCh, 10*time.Second, "a's wait")
	bWait := recv(t, bWaitCh, 10*time.Second, "b's wait")
	eventually(t, 10*time.Second, func() error { // both waits recorded
		found, err := ca.Deadlocks(ctx)
		if err == nil && len(found) != 1 {
			err = fmt.Errorf("deadlocks %+v, want 1", found)
		}
		return err
	})
	ca.waits.check(ctx)
	cb.waits.check(ctx)
	for who, wctx := range map[string]context.Context{"a": aWait, "b": bWait} {
		if wctx.Err() != nil {
			t.Fatalf("%s's Lock failed at the first sighting of the cycle (%v); want it confirmed by a second check first", who, context.Cause(wctx))
		}
	}
	ca.waits.check(ctx)
	cb.waits.check(ctx)
	failed := 0
	for _, wctx := range []context.Context{aWait, bWait} {
		if errors.Is(context.Cause(wctx), ErrDeadlock) {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d Locks failed at the second sighting of the cycle (a: %v, b: %v), want the youngest's", failed, context.Cause(aWait), context.Cause(bWait))
	}
	// The youngest is b (it started waiting last), but for a tie of
	// their starts in one millisecond, broken by the owner's name.
	victim, other := x.bDone, x.aDone
	victimHeld, victimLock, otherHeld, otherLock := x.b, x.l2b, x.a, x.l1a
	if errors.Is(context.Cause(aWait), ErrDeadlock) {
		victim, other = x.aDone, x.bDone
		victimHeld, victimLock, otherHeld, otherLock = x.a, x.l1a, x.b, x.l2b
	}
	if err := recv(t, victim, 10*time.Second, "the youngest waiter failing"); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("the youngest waiter's Lock: %v, want ErrDeadlock", err)
	}
	if err := victimLock.Unlock(victimHeld); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, other, 10*time.Second, "the other waiter once the youngest let go"); err != nil {
		t.Errorf("the other waiter's Lock: %v", err)
	}
	if err := otherLock.Unlock(otherHeld); err != nil {
		t.Fatal(err)
	}
}

// TestDeadlockNoFalsePositive: owners on two Clients take two locks, in
// the same order, many times over, waiting for each other all along; no
// Lock fails with ErrDeadlock and Deadlocks never reports a cycle.
func TestDeadlockNoFalsePositive(t *testing.T) {
	const every = 20 * time.Millisecond
	name := lockName(t)
	var waited atomic.Int64 // nested waits: an owner holding l1 sleeps for l2
	count := WithObserver(Observer{Wait: func(_ context.Context, l LockInfo, w WaitInfo) {
		if w.Round == 1 && l.Name == name+":2" {
			waited.Add(1)
		}
	}})
	clients := []*Client{newClient(t, nil, WithDeadlockDetection(every), count), newClient(t, nil, WithDeadlockDetection(every), count)}
	ctx := boundedCtx(t, 60*time.Second)
	runCtx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var rounds atomic.Int64
	errs := make(chan error, 16)
	for i := range 6 {
		c := clients[i%2]
		l1, l2 := mustMutex(t, c, name+":1"), mustMutex(t, c, name+":2")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				c1, err := l1.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				c2, err := l2.Lock(c1)
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Millisecond) // the critical section
				_ = l1.Unlock(c1)            // l1 first: the next owner waits for l2...
				time.Sleep(2 * time.Millisecond)
				_ = l2.Unlock(c2) // ...holding l1
				rounds.Add(1)
			}
		}()
	}
	checker := newClient(t, nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			if d, err := checker.Deadlocks(ctx); err == nil && len(d) > 0 {
				errs <- fmt.Errorf("cycle reported: %+v", d)
				return
			}
			time.Sleep(every)
		}
	}()
	awaitGroup(t, &wg, 30*time.Second, "the owners")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d rounds, %d nested waits, no deadlock reported", rounds.Load(), waited.Load())
	if rounds.Load() < 10 || waited.Load() == 0 {
		t.Errorf("%d rounds, %d nested waits: not a contended run", rounds.Load(), waited.Load())
	}
}

// TestDeadlockOption: a negative or too short interval is refused.
func TestDeadlockOption(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, time.Millisecond} {
		if _, err := New(newRedis(t), WithDeadlockDetection(d)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithDeadlockDetection(%v): %v, want ErrInvalidOption", d, err)
		}
	}
}

// BenchmarkDeadlockRecordCost measures what recording waits costs Redis:
// the commands a contended nested wait (an owner holding one lock waits
// for another, which its holder then releases) makes the server process,
// with WithDeadlockDetection (record only, and checking every 10ms) and
// without it. Reported as cmds/wait, from INFO's
// total_commands_processed on a server of its own.
func BenchmarkDeadlockRecordCost(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"off", nil}, {"record", []Option{WithDeadlockDetection(0)}}, {"check-10ms", []Option{WithDeadlockDetection(10 * time.Millisecond)}}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := redistest.NewServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			ctx := context.Background()
			ca, cb := newClient(b, rdb, mode.opts...), newClient(b, rdb, mode.opts...)
			l1, l2a, l2b := mustMutex(b, ca, "cost:1"), mustMutex(b, ca, "cost:2"), mustMutex(b, cb, "cost:2")
			processed := func() int64 {
				info, err := rdb.Info(ctx, "stats").Result()
				if err != nil {
					b.Fatal(err)
				}
				for _, line := range strings.Split(info, "\r\n") {
					if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						return n
					}
				}
				b.Fatal("no total_commands_processed in INFO")
				return 0
			}
			before := processed()
			for range b.N {
				held := mustLock(b, ctx, l1)
				other := mustLock(b, ctx, l2b)
				done := make(chan error, 1)
				go func() {
					lctx, err := l2a.Lock(held) // waits: l2 is held
					if err == nil {
						err = l2a.Unlock(lctx)
					}
					done <- err
				}()
				eventually(b, 10*time.Second, func() error { // a sleeps in its wait
					if ok, _ := rdb.PubSubNumSub(ctx, layout.Prefixed(layout.LockChannelPrefix, "cost:2")).Result(); ok[layout.Prefixed(layout.LockChannelPrefix, "cost:2")] == 0 {
						return fmt.Errorf("not waiting yet")
					}
					return nil
				})
				time.Sleep(30 * time.Millisecond) // a few checks while it waits
				_ = l2b.Unlock(other)
				if err := recv(b, done, 10*time.Second, "the wait"); err != nil {
					b.Fatal(err)
				}
				_ = l1.Unlock(held)
			}
			b.ReportMetric(float64(processed()-before)/float64(b.N), "cmds/wait")
		})
	}
}

// TestDeadlockCluster: on a Redis Cluster the detector reads the wait
// records (the index and every Client's record share the {waits} hash
// tag, so one slot on one master) and breaks the cycle.
func TestDeadlockCluster(t *testing.T) {
	cl := sharedCluster(t)
	const every = 100 * time.Millisecond
	ca := newClient(t, newClusterRedis(t, cl, time.Second), WithDeadlockDetection(every))
	cb := newClient(t, newClusterRedis(t, cl, time.Second), WithDeadlockDetection(every))
	x := startCrossWait(t, ca, cb)
	if err := recv(t, x.bDone, 10*time.Second, "b failing in the deadlock"); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("b's Lock: %v, want ErrDeadlock", err)
	}
	if err := x.l2b.Unlock(x.b); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, x.aDone, 10*time.Second, "a's wait once b let go"); err != nil {
		t.Errorf("a's Lock: %v", err)
	}
	if err := x.l1a.Unlock(x.a); err != nil {
		t.Fatal(err)
	}
}

// TestCyclesOf: every simple cycle of a wait-for graph once, whatever
// node it is entered from; paths without a cycle and self-loops are none.
func TestCyclesOf(t *testing.T) {
	graph := map[string][]string{
		"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, // a→b→c→a
		"d": {"b"},      // b→d→b
		"e": {"a", "e"}, // waits into a cycle; a self-loop is no cycle
	}
	got := cyclesOf([]string{"a", "b", "c", "d", "e"}, func(n string) []string {
		return slices.DeleteFunc(slices.Clone(graph[n]), func(m string) bool { return m == n })
	})
	want := [][]string{{"a", "b", "c"}, {"b", "d"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Errorf("cycles %v, want %v", got, want)
	}
}

// nestedWait makes an owner of ca, holding lock name:1, wait for name:2,
// which cb holds; it returns once ca has the wait in memory (its record
// may not be written yet), and a function that ends the wait (cb lets go,
// the owner gets name:2) and releases both locks.
func nestedWait(t *testing.T, ca, cb *Client, name string) (end func()) {
	t.Helper()
	ctx := boundedCtx(t, 60*time.Second)
	l1, l2a, l2b := mustMutex(t, ca, name+":1"), mustMutex(t, ca, name+":2"), mustMutex(t, cb, name+":2")
	held, other := mustLock(t, ctx, l1), mustLock(t, ctx, l2b)
	done := make(chan error, 1)
	go func() {
		lctx, err := l2a.Lock(held)
		if err == nil {
			err = l2a.Unlock(lctx)
		}
		done <- err
	}()
	eventually(t, 10*time.Second, func() error {
		if n := len(ca.waits.snapshot()); n != 1 {
			return fmt.Errorf("%d waits recorded in memory, want 1", n)
		}
		return nil
	})
	return func() {
		t.Helper()
		if err := l2b.Unlock(other); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, done, 10*time.Second, "the nested wait"); err != nil {
			t.Fatal(err)
		}
		if err := l1.Unlock(held); err != nil {
			t.Fatal(err)
		}
	}
}

// serverMillis returns the server's clock in Unix milliseconds.
func serverMillis(t testing.TB, rdb redis.Cmdable) int64 {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// TestDeadlockIndexPruned: the wait records are found through their
// index, not a SCAN. An entry whose record expired without being deleted
// (its Client was killed) is pruned by the next write of any Client, a
// live entry is scored with its record's expiry, and the index expires
// with its last entry; an ended wait takes its entry out at once.
func TestDeadlockIndexPruned(t *testing.T) {
	srv := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	const ghost = "killed-client"
	if err := rdb.ZAdd(ctx, layout.WaitsIndex, redis.Z{Score: float64(serverMillis(t, rdb) - 1000), Member: ghost}).Err(); err != nil {
		t.Fatal(err)
	}
	ca := newClient(t, rdb, WithDeadlockDetection(0))
	cb := newClient(t, rdb)
	end := nestedWait(t, ca, cb, "pruned")
	eventually(t, 10*time.Second, func() error {
		if !exists(t, rdb, layout.WaitsPrefix+ca.id) {
			return errors.New("wait record not written")
		}
		return nil
	})
	entries, err := rdb.ZRangeWithScores(ctx, layout.WaitsIndex, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Member != ca.id {
		t.Fatalf("index %+v, want only %s (the killed Client's entry pruned)", entries, ca.id)
	}
	recordTTL, indexTTL := pttl(t, rdb, layout.WaitsPrefix+ca.id), pttl(t, rdb, layout.WaitsIndex)
	if left := int64(entries[0].Score) - serverMillis(t, rdb); recordTTL <= 0 || indexTTL <= 0 ||
		(indexTTL-recordTTL).Abs() > time.Second || (time.Duration(left)*time.Millisecond-recordTTL).Abs() > time.Second {
		t.Errorf("record TTL %v, index TTL %v, entry expires in %d ms: want all the same", recordTTL, indexTTL, left)
	}
	if waits, err := ca.readWaits(ctx); err != nil || len(waits) != 1 {
		t.Errorf("read %+v, %v: want the one wait", waits, err)
	}
	end()
	eventually(t, 10*time.Second, func() error {
		if n, err := rdb.Exists(ctx, layout.WaitsIndex, layout.WaitsPrefix+ca.id).Result(); err != nil || n != 0 {
			return fmt.Errorf("%d of index and record left (%v)", n, err)
		}
		return nil
	})
}

// logBuffer collects a Client's log, Debug included.
func logBuffer() (*syncBuffer, Option) {
	var buf syncBuffer
	return &buf, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// TestDeadlockWriteRetried: a wait record whose write failed is written
// again within moments, not at the next change or refresh (20 s here).
func TestDeadlockWriteRetried(t *testing.T) {
	srv := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	if err := rdb.Set(ctx, layout.WaitsIndex, "not a sorted set", 0).Err(); err != nil { // every write fails: WRONGTYPE
		t.Fatal(err)
	}
	logs, logTo := logBuffer()
	ca := newClient(t, rdb, WithDeadlockDetection(0), WithWatchdogTimeout(time.Minute), logTo)
	cb := newClient(t, rdb)
	end := nestedWait(t, ca, cb, "retried")
	eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "wait record not written") {
			return fmt.Errorf("no failed write logged: %q", logs.String())
		}
		return nil
	})
	if err := rdb.Del(ctx, layout.WaitsIndex).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		if !exists(t, rdb, layout.WaitsPrefix+ca.id) {
			return errors.New("wait record not written again")
		}
		return nil
	})
	t.Logf("written %v after the cause of the failure went", time.Since(start).Round(time.Millisecond))
	end()
}

// countWaitCommands is a go-redis hook counting the commands that name a
// wait record or the index.
type countWaitCommands struct{ n *atomic.Int64 }

func (h countWaitCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countWaitCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h countWaitCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h countWaitCommands) count(cmd redis.Cmder) {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasPrefix(s, layout.WaitsIndex) {
			h.n.Add(1)
			return
		}
	}
}

// TestDeadlockIdle: a Client with detection that has no waits sends no
// wait-record or check commands, and its loop is not running: before its
// first wait, and after its last one ended (the record deleted). The
// refresh (every 100 ms here) and the check (every 20 ms) would show
// within the second watched.
func TestDeadlockIdle(t *testing.T) {
	var sent atomic.Int64
	rdb := newRedis(t)
	rdb.AddHook(countWaitCommands{&sent})
	ca := newClient(t, rdb, WithDeadlockDetection(20*time.Millisecond), WithWatchdogTimeout(300*time.Millisecond))
	cb := newClient(t, nil)
	idleFor := func(what string) {
		t.Helper()
		before := sent.Load()
		time.Sleep(time.Second) // the window watched: nothing may happen in it
		if n := sent.Load() - before; n != 0 {
			t.Errorf("%s: %d commands on the wait records in a second", what, n)
		}
		ca.waits.mu.Lock()
		running := ca.waits.stop != nil
		ca.waits.mu.Unlock()
		if running {
			t.Errorf("%s: the wait loop runs", what)
		}
	}
	m := mustMutex(t, ca, lockName(t)+":alone")
	lctx := mustLock(t, t.Context(), m) // the Client is in use, uncontended
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	idleFor("before any wait")
	end := nestedWait(t, ca, cb, lockName(t))
	eventually(t, 10*time.Second, func() error {
		if sent.Load() < 2 {
			return fmt.Errorf("%d commands on the wait records, want a write and a check", sent.Load())
		}
		return nil
	})
	end()
	eventually(t, 10*time.Second, func() error {
		ca.waits.mu.Lock()
		defer ca.waits.mu.Unlock()
		if ca.waits.stop != nil {
			return errors.New("the wait loop still runs")
		}
		return nil
	})
	if exists(t, rdb, layout.WaitsPrefix+ca.id) {
		t.Error("the wait record is left after the wait ended")
	}
	idleFor("after the wait ended")
}

// BenchmarkDeadlockCheckKeyspace measures one Deadlocks call (what each
// check reads) with one recorded wait, on a server of its own that holds
// a million unrelated keys: the check must cost what the waits cost, not
// what the keyspace holds.
func BenchmarkDeadlockCheckKeyspace(b *testing.B) {
	for _, keys := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			srv := redistest.NewServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			ctx := context.Background()
			for from := 0; from < keys; from += 50_000 { // short scripts: the server stays responsive
				if err := rdb.Eval(ctx, "for i = ARGV[1], ARGV[2] do redis.call('set', 'unrelated:' .. i, i) end return 1", nil, from+1, min(from+50_000, keys)).Err(); err != nil {
					b.Fatal(err)
				}
			}
			ca, cb := newClient(b, rdb, WithDeadlockDetection(0)), newClient(b, rdb)
			l1, l2a, l2b := mustMutex(b, ca, "keyspace:1"), mustMutex(b, ca, "keyspace:2"), mustMutex(b, cb, "keyspace:2")
			held, other := mustLock(b, ctx, l1), mustLock(b, ctx, l2b)
			done := make(chan error, 1)
			go func() {
				lctx, err := l2a.Lock(held)
				if err == nil {
					err = l2a.Unlock(lctx)
				}
				done <- err
			}()
			checker := newClient(b, rdb)
			eventually(b, 10*time.Second, func() error { // the wait is recorded
				if n, err := rdb.DBSize(ctx).Result(); err != nil || n < int64(keys) {
					return fmt.Errorf("dbsize %d (%v)", n, err)
				}
				if d, err := checker.Deadlocks(ctx); err != nil || len(d) != 0 {
					return fmt.Errorf("deadlocks %v, %v", d, err)
				}
				if !exists(b, rdb, layout.WaitsPrefix+ca.id) {
					return errors.New("the wait is not recorded yet")
				}
				return nil
			})
			b.ResetTimer()
			for range b.N {
				if _, err := checker.Deadlocks(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = l2b.Unlock(other)
			if err := recv(b, done, 10*time.Second, "the wait"); err != nil {
				b.Fatal(err)
			}
			_ = l1.Unlock(held)
		})
	}
}
