package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an Observer that keeps every event, as text and as values.
type recorder struct {
	mu       sync.Mutex
	events   []string
	ends     []LockEnd
	waits    []WaitInfo
	unlocks  []UnlockInfo
	renewals []RenewalInfo
	lost     []LostInfo
	recons   []ReconnectInfo
	changed  chan struct{} // receives after each event, if anyone listens
}

type ctxMark struct{}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) add(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) observer() Observer {
	return Observer{
		LockStart: func(ctx context.Context, l LockInfo) context.Context {
			r.add(func() { r.events = append(r.events, fmt.Sprintf("start %s %s try=%v", l.Kind, l.Name, l.Try)) })
			return context.WithValue(ctx, ctxMark{}, l.Name)
		},
		Wait: func(ctx context.Context, l LockInfo, w WaitInfo) {
			r.add(func() {
				r.events = append(r.events, fmt.Sprintf("wait %s round=%d mark=%v", l.Name, w.Round, ctx.Value(ctxMark{})))
				r.waits = append(r.waits, w)
			})
		},
		LockEnd: func(ctx context.Context, l LockInfo, e LockEnd) {
			r.add(func() {
				r.events = append(r.events, fmt.Sprintf("end %s %s reentry=%v mark=%v", l.Name, e.Outcome, e.Reentry, ctx.Value(ctxMark{})))
				r.ends = append(r.ends, e)
			})
		},
		Unlocked: func(_ context.Context, l LockInfo, u UnlockInfo) {
			r.add(func() {
				r.events = append(r.events, fmt.Sprintf("unlock %s %s last=%v", l.Kind, l.Name, u.Last))
				r.unlocks = append(r.unlocks, u)
			})
		},
		Renewal: func(e RenewalInfo) { r.add(func() { r.renewals = append(r.renewals, e) }) },
		Lost: func(l LockInfo, e LostInfo) {
			r.add(func() {
				r.events = append(r.events, fmt.Sprintf("lost %s %s %s", l.Kind, l.Name, e.Cause))
				r.lost = append(r.lost, e)
			})
		},
		Reconnect: func(e ReconnectInfo) { r.add(func() { r.recons = append(r.recons, e) }) },
	}
}

// await waits until cond, checked under the recorder's lock, holds.
func (r *recorder) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no %s; events: %q", what, r.events)
		}
	}
}

func (r *recorder) eventList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func TestObserverLockWaitReentryUnlock(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()))
	name := lockName(t)
	m := mustMutex(t, c, name)

	a := mustLock(t, ctx, m)
	inner := mustLock(t, a, m) // re-entry
	if err := m.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		b, err := m.Lock(ctx) // another owner: waits
		if err == nil {
			err = m.Unlock(b)
		}
		got <- err
	}()
	rec.await(t, "wait of the second owner", func() bool { return len(rec.waits) >= 1 })
	time.Sleep(20 * time.Millisecond) // a hold time to measure
	if err := m.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "the waiting Lock and its Unlock"); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "the second owner's unlock", func() bool { return len(rec.unlocks) == 3 })

	want := []string{
		"start mutex " + name + " try=false",
		"end " + name + " acquired reentry=false mark=" + name,
		"start mutex " + name + " try=false",
		"end " + name + " acquired reentry=true mark=" + name,
		"unlock mutex " + name + " last=false",
		"start mutex " + name + " try=false",
		"wait " + name + " round=1 mark=" + name,
		"unlock mutex " + name + " last=true",
		"end " + name + " acquired reentry=false mark=" + name,
		"unlock mutex " + name + " last=true",
	}
	// The first owner's last Unlock and the second owner's Lock end on
	// their own goroutines: their order varies.
	// (The first sleep ends when the subscription is confirmed, and more
	// rounds follow: only the first is compared.)
	ev := slices.DeleteFunc(rec.eventList(), func(e string) bool {
		return strings.HasPrefix(e, "wait ") && !strings.Contains(e, " round=1 ")
	})
	if len(ev) == len(want) {
		slices.Sort(ev[7:])
		slices.Sort(want[7:])
	}
	if !slices.Equal(ev, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", ev, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if w := rec.waits[0]; w.HolderTTL <= 0 || w.HolderTTL > DefaultWatchdogTimeout {
		t.Errorf("wait: holder TTL %v, want within the watchdog lease", w.HolderTTL)
	}
	if e := rec.ends[2]; e.Rounds < 1 || e.Wait < 20*time.Millisecond {
		t.Errorf("waiting Lock ended with %d rounds after %v, want >= 1 round and >= 20ms", e.Rounds, e.Wait)
	}
	// The first owner's outer hold is the longest (the other two unlocks
	// may come in either order).
	u := slices.MaxFunc(rec.unlocks, func(a, b UnlockInfo) int { return cmp.Compare(a.Held, b.Held) })
	if u.Held < 20*time.Millisecond || !u.Last || u.Err != nil {
		t.Errorf("outer unlock: %+v; want held >= 20ms, last, no error", u)
	}
}

func TestObserverOutcomes(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()))
	name := lockName(t)
	m := mustMutex(t, c, name)
	held := mustLock(t, ctx, m)
	defer m.Unlock(held)

	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := m.Lock(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	cctx, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := m.Lock(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled context: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var outcomes []Outcome
	for _, e := range rec.ends {
		outcomes = append(outcomes, e.Outcome)
	}
	if want := []Outcome{OutcomeAcquired, OutcomeBusy, OutcomeTimeout, OutcomeCanceled}; !slices.Equal(outcomes, want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	if e := rec.ends[2]; e.Rounds < 1 || e.Err == nil {
		t.Errorf("timed-out Lock: %d rounds, err %v; want >= 1 round and its error", e.Rounds, e.Err)
	}
}

func TestObserverLostAndRenewal(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()), WithWatchdogTimeout(300*time.Millisecond))
	name := lockName(t)

	// A fixed lease that runs out: expired.
	fixed := mustMutex(t, c, name+":fixed", WithLease(50*time.Millisecond))
	fctx := mustLock(t, ctx, fixed)
	awaitDone(t, fctx, 10*time.Second, "the lock context of a 50ms lease")
	// A watchdog-renewed lock deleted behind its holder's back: rejected
	// at the next renewal.
	m := mustMutex(t, c, name)
	lctx := mustLock(t, ctx, m)
	rec.await(t, "a renewal", func() bool { return len(rec.renewals) > 0 })
	if _, err := newRedis(t).Del(ctx, name).Result(); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, lctx, 10*time.Second, "the lock context of a deleted lock (watchdog 300ms)")
	rec.await(t, "two lost locks", func() bool { return len(rec.lost) == 2 })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if l := rec.lost[0]; l.Cause != LostExpired || !errors.Is(l.Err, ErrLockLost) || l.Acquisitions != 1 || l.Held <= 0 {
		t.Errorf("fixed lease: lost %+v, want expired, held a while", l)
	}
	if l := rec.lost[1]; l.Cause != LostRejected || !errors.Is(l.Err, ErrLockLost) {
		t.Errorf("deleted lock: lost %+v, want rejected", l)
	}
	r := rec.renewals[0]
	if r.Locks != 1 || r.Lost != 0 || r.Err != nil || r.Latency <= 0 {
		t.Errorf("first renewal %+v, want 1 lock, none lost", r)
	}
	if r := rec.renewals[len(rec.renewals)-1]; r.Lost != 1 {
		t.Errorf("last renewal %+v, want the deleted lock lost", r)
	}
}

func TestObserverClosedAndReconnect(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	rdb := newRedis(t)
	c, err := New(rdb, WithObserver(rec.observer()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := lockName(t)
	m := mustMutex(t, c, name)
	held := mustLock(t, ctx, m)

	// A waiter keeps the pub/sub connection open; killing it is a reconnect.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = m.Lock(wctx)
	}()
	// Round 2 starts once the subscription is confirmed.
	rec.await(t, "a subscribed waiter", func() bool { return len(rec.waits) >= 2 })
	if n, err := newRedis(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n == 0 {
		t.Fatalf("killing the pub/sub connection: %d killed, %v", n, err)
	}
	rec.await(t, "a reconnect", func() bool { return len(rec.recons) > 0 })
	cancel()
	recv(t, done, 10*time.Second, "the cancelled waiter's return")

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, held, 10*time.Second, "the lock context of a hold ended by Close")
	rec.await(t, "the hold lost to Close", func() bool { return len(rec.lost) == 1 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if l := rec.lost[0]; l.Cause != LostClosed || !errors.Is(l.Err, ErrClosed) {
		t.Errorf("lost %+v, want closed", l)
	}
	if rec.recons[0].Err == nil {
		t.Errorf("reconnect without a reason")
	}
	_ = rdb.Del(ctx, name).Err()
}

// TestObserverSeveral: every observer hears every event, and a nil hook
// is skipped.
func TestObserverSeveral(t *testing.T) {
	ctx := context.Background()
	a, b := newRecorder(), newRecorder()
	c := newClient(t, nil, WithObserver(a.observer()), WithObserver(Observer{}), WithObserver(b.observer()))
	m := mustMutex(t, c, lockName(t))
	l := mustLock(t, ctx, m)
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if ea, eb := a.eventList(), b.eventList(); len(ea) != 3 || !slices.Equal(ea, eb) {
		t.Fatalf("events %q and %q, want the same 3", ea, eb)
	}
}

// BenchmarkLockUnlockObserved is BenchmarkLockUnlock with an observer
// whose hooks do nothing: the cost of reporting the events.
func BenchmarkLockUnlockObserved(b *testing.B) {
	ctx := context.Background()
	c := newClient(b, nil, WithObserver(Observer{
		LockStart: func(ctx context.Context, _ LockInfo) context.Context { return ctx },
		LockEnd:   func(context.Context, LockInfo, LockEnd) {},
		Unlocked:  func(context.Context, LockInfo, UnlockInfo) {},
	}))
	m := mustMutex(b, c, lockName(b))
	for b.Loop() {
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(l); err != nil {
			b.Fatal(err)
		}
	}
}

// TestObserverKinds: each lock kind reports the Kind it declares.
func TestObserverKinds(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()))
	name := lockName(t)
	fair, err := c.NewFairMutex(name + ":fair")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.NewRWMutex(name + ":rw")
	if err != nil {
		t.Fatal(err)
	}
	_, nodes := redLockNodes(t, 3, WithObserver(rec.observer()))
	red := mustRedLock(t, nodes, name+":red")
	spin := mustSpinLock(t, c, name+":spin")
	locks := []struct {
		kind string
		l    Locker
	}{
		{KindMutex, mustMutex(t, c, name)}, {KindFair, fair}, {KindRead, rw.ReadLock()},
		{KindWrite, rw.WriteLock()}, {KindRedLock, red}, {KindSpin, spin},
	}
	for _, l := range locks {
		lctx := mustLock(t, ctx, l.l)
		if err := l.l.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		ev := rec.eventList()
		if want := "unlock " + l.kind + " "; len(ev) < 3 || !strings.HasPrefix(ev[len(ev)-3], "start "+l.kind+" ") || !strings.HasPrefix(ev[len(ev)-1], want) {
			t.Errorf("%s: events end with %q, want its start and unlock", l.kind, ev[max(0, len(ev)-3):])
		}
	}
}

// TestObserverSemaphore: a Semaphore's Acquire and TryAcquire are
// reported as a lock's (LockStart, Wait, LockEnd; busy when TryAcquire
// gets nothing) and its Release as an Unlocked whose hold time is not
// known; setting permits reports nothing.
func TestObserverSemaphore(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()))
	name := lockName(t)
	s, err := c.NewSemaphore(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TryAcquire(ctx, 1); ok || err != nil {
		t.Fatalf("TryAcquire with no permit left: %v, %v", ok, err)
	}
	got := make(chan error, 1)
	go func() {
		err := s.Acquire(ctx, 1) // waits for the Release below
		if err == nil {
			err = s.Release(ctx, 1)
		}
		got <- err
	}()
	rec.await(t, "the waiter's first sleep", func() bool { return len(rec.waits) >= 1 })
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "the waiting Acquire and its Release"); err != nil {
		t.Fatal(err)
	}
	rec.await(t, "two releases", func() bool { return len(rec.unlocks) == 2 })

	want := []string{
		"start semaphore " + name + " try=false",
		"end " + name + " acquired reentry=false mark=" + name,
		"start semaphore " + name + " try=true",
		"end " + name + " busy reentry=false mark=" + name,
		"start semaphore " + name + " try=false",
		"wait " + name + " round=1 mark=" + name,
		"unlock semaphore " + name + " last=true",
		"end " + name + " acquired reentry=false mark=" + name,
		"unlock semaphore " + name + " last=true",
	}
	// The main goroutine's Release and the waiter's Acquire end on their
	// own goroutines: their order varies; later sleeps are not compared.
	ev := slices.DeleteFunc(rec.eventList(), func(e string) bool {
		return strings.HasPrefix(e, "wait ") && !strings.Contains(e, " round=1 ")
	})
	if len(ev) == len(want) {
		slices.Sort(ev[6:])
		slices.Sort(want[6:])
	}
	if !slices.Equal(ev, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", ev, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if e := rec.ends[1]; !errors.Is(e.Err, ErrNotObtained) {
		t.Errorf("TryAcquire that got nothing: %+v, want ErrNotObtained", e)
	}
	if e := rec.ends[2]; e.Rounds < 1 || e.Err != nil {
		t.Errorf("waiting Acquire: %+v, want >= 1 round and no error", e)
	}
	for _, u := range rec.unlocks {
		if u.Held >= 0 || !u.Last || u.Err != nil {
			t.Errorf("Release: %+v, want an unknown (negative) hold time, last, no error", u)
		}
	}
}

// TestObserverPermitSemaphore: a permit is a hold with a lease: Acquire
// and Release are reported as a Lock and its Unlock (with the hold time),
// a wait reports the earliest holder's lease left, and a permit that ends
// without Release is reported Lost like a lock: rejected when the renewal
// finds it deleted, expired when its fixed lease runs out, closed at
// Close. A permit found gone by Release is reported by Unlocked, not Lost.
func TestObserverPermitSemaphore(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()), WithWatchdogTimeout(300*time.Millisecond))
	name := lockName(t)
	s := mustPermitSemaphore(t, c, name)
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// A hold and its release; a waiter sees the holder's lease.
	p1, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire with no permit left: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until its deadline: %v", err)
	}
	if err := s.Release(p1); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"start permit " + name + " try=false",
		"end " + name + " acquired reentry=false mark=" + name,
		"start permit " + name + " try=true",
		"end " + name + " busy reentry=false mark=" + name,
		"start permit " + name + " try=false",
		"wait " + name + " round=1 mark=" + name,
		"end " + name + " timeout reentry=false mark=" + name,
		"unlock permit " + name + " last=true",
	}
	ev := slices.DeleteFunc(rec.eventList(), func(e string) bool {
		return strings.HasPrefix(e, "wait ") && !strings.Contains(e, " round=1 ")
	})
	if !slices.Equal(ev, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", ev, want)
	}
	rec.mu.Lock()
	if w := rec.waits[0]; w.HolderTTL <= 0 || w.HolderTTL > 300*time.Millisecond {
		t.Errorf("wait: holder TTL %v, want within the watchdog lease (300ms)", w.HolderTTL)
	}
	if u := rec.unlocks[0]; u.Held < 100*time.Millisecond || !u.Last || u.Err != nil {
		t.Errorf("Release: %+v, want held >= 100ms (the timed-out wait), last, no error", u)
	}
	rec.mu.Unlock()

	// Deleted behind its holder's back: the renewal rejects it.
	p2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	wantEnded(t, p2, ErrLockLost)
	rec.await(t, "the deleted permit lost", func() bool { return len(rec.lost) == 1 })
	if err := s.Release(p2); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release of a lost permit: %v", err)
	}

	// A fixed lease that runs out: expired.
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short := mustPermitSemaphore(t, c, name, WithPermitLease(50*time.Millisecond))
	p3, err := short.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantEnded(t, p3, ErrLockLost)
	rec.await(t, "the expired permit lost", func() bool { return len(rec.lost) == 2 })

	// Deleted under a fixed lease (nothing renews it): Release finds it
	// gone and reports it, as Unlock does a lock lost unnoticed.
	long := mustPermitSemaphore(t, c, name, WithPermitLease(time.Minute))
	p4, err := long.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := long.Release(p4); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release of a deleted permit: %v", err)
	}

	// Close ends the permits held.
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p5, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wantEnded(t, p5, ErrClosed)
	rec.await(t, "the permit lost to Close", func() bool { return len(rec.lost) == 3 })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	causes := []LostCause{LostRejected, LostExpired, LostClosed}
	for i, l := range rec.lost {
		if l.Cause != causes[i] || l.Acquisitions != 1 || l.Held <= 0 || l.Err == nil {
			t.Errorf("lost permit %d: %+v, want cause %s, one acquisition, held a while", i, l, causes[i])
		}
	}
	if len(rec.unlocks) != 2 {
		t.Fatalf("unlocks %+v, want 2: the release and the one that found its permit gone", rec.unlocks)
	}
	if u := rec.unlocks[1]; !errors.Is(u.Err, ErrNotHeld) || u.Held <= 0 {
		t.Errorf("Release of a deleted permit: %+v, want ErrNotHeld and its hold time", u)
	}
	for _, e := range rec.events {
		if strings.HasPrefix(e, "lost ") && !strings.HasPrefix(e, "lost permit "+name+" ") {
			t.Errorf("event %q, want kind permit and the semaphore's name", e)
		}
	}
}

// TestObserverCountDownLatch: an Await is a wait with no hold after it:
// LockStart, Wait per sleep, LockEnd with outcome opened (at once on an
// open latch), timeout when ctx ends first.
func TestObserverCountDownLatch(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()))
	name := lockName(t)
	l, err := c.NewCountDownLatch(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Await(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await on a closed latch until its deadline: %v", err)
	}
	rec.mu.Lock()
	before := len(rec.waits) // the timed-out Await's sleeps
	rec.mu.Unlock()
	got := make(chan error, 1)
	go func() { got <- l.Await(ctx) }()
	rec.await(t, "the waiter's first sleep", func() bool { return len(rec.waits) > before })
	if _, err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "the Await of a latch counted down"); err != nil {
		t.Fatal(err)
	}
	if err := l.Await(ctx); err != nil { // open: at once
		t.Fatal(err)
	}
	want := []string{
		"start latch " + name + " try=false",
		"wait " + name + " round=1 mark=" + name,
		"end " + name + " timeout reentry=false mark=" + name,
		"start latch " + name + " try=false",
		"wait " + name + " round=1 mark=" + name,
		"end " + name + " opened reentry=false mark=" + name,
		"start latch " + name + " try=false",
		"end " + name + " opened reentry=false mark=" + name,
	}
	ev := slices.DeleteFunc(rec.eventList(), func(e string) bool {
		return strings.HasPrefix(e, "wait ") && !strings.Contains(e, " round=1 ")
	})
	if !slices.Equal(ev, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", ev, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if e := rec.ends[1]; e.Rounds < 1 || e.Err != nil || e.Wait <= 0 {
		t.Errorf("Await until the count-down: %+v, want >= 1 round, no error", e)
	}
	if e := rec.ends[2]; e.Rounds != 0 {
		t.Errorf("Await on an open latch: %+v, want no sleep", e)
	}
}

// TestObserverPermitRenewal: the watchdog's renewals of permits are
// reported as a lock's are: one Renewal per script call, with the
// permits it renewed and, once a permit is deleted behind its holder's
// back, the one it found lost.
func TestObserverPermitRenewal(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder()
	c := newClient(t, nil, WithObserver(rec.observer()), WithWatchdogTimeout(300*time.Millisecond))
	s := mustPermitSemaphore(t, c, lockName(t))
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.await(t, "a permit renewal", func() bool { return len(rec.renewals) > 0 })
	if _, err := newRedis(t).Del(ctx, s.timeouts).Result(); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, p, 10*time.Second, "the permit context of a deleted permit (watchdog 300ms)")
	rec.await(t, "a renewal that found the permit lost", func() bool {
		return len(rec.renewals) > 0 && rec.renewals[len(rec.renewals)-1].Lost == 1
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if r := rec.renewals[0]; r.Locks != 1 || r.Lost != 0 || r.Err != nil || r.Latency <= 0 {
		t.Errorf("first permit renewal %+v, want 1 permit, none lost", r)
	}
}
