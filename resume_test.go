package dlock

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A holder paused past its lease (SIGSTOP, a frozen VM) and resumed runs
// its own next check of the lock context before the Client's expiry timer
// gets to run: that check must find the lock context ended. The tests
// play the pause with the registry's clock skew: the Client's clock moves
// past the lease and no timer fires, which is what the resumed process
// sees. Each round is one pause; every first look after it must say the
// lease ran out.

// resumeRounds is how many pauses each kind goes through.
const resumeRounds = 50

// pauseFor moves c's clock ahead by d, without running any timer, until
// the returned function moves it back.
func pauseFor(c *Client, d time.Duration) (back func()) {
	c.holds.skew.Add(int64(d))
	return func() { c.holds.skew.Add(-int64(d)) }
}

// registeredHolds is the number of holds in c's registry.
func registeredHolds(c *Client) int {
	c.holds.mu.Lock()
	defer c.holds.mu.Unlock()
	return len(c.holds.dl.heap)
}

// endOverdue does what c's timers do once they run: every hold and permit
// past its deadline by c's clock is lost.
func endOverdue(c *Client) {
	c.holds.sweep()
	c.permits.mu.Lock()
	permits := slices.Collect(maps.Keys(c.permits.permits))
	c.permits.mu.Unlock()
	for _, p := range permits {
		p.mu.Lock()
		due := !c.holds.now().Before(p.until)
		p.mu.Unlock()
		if due {
			p.expire()
		}
	}
}

// resumedKind takes one lock of a kind and returns its lock context and a
// way to clear what the lost hold left in Redis.
type resumedKind struct {
	name string
	take func(t *testing.T, ctx context.Context, c *Client, name string) (lockCtx context.Context, clear func())
}

// lockerKind is a resumedKind for anything with Lock and ForceUnlock.
func lockerKind(name string, make func(c *Client, name string) (interface {
	Lock(context.Context) (context.Context, error)
	ForceUnlock(context.Context) (bool, error)
}, error)) resumedKind {
	return resumedKind{name, func(t *testing.T, ctx context.Context, c *Client, name string) (context.Context, func()) {
		l, err := make(c, name)
		if err != nil {
			t.Fatal(err)
		}
		lctx := mustLock(t, ctx, l)
		return lctx, func() {
			if _, err := l.ForceUnlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}}
}

func resumedKinds() []resumedKind {
	type locker = interface {
		Lock(context.Context) (context.Context, error)
		ForceUnlock(context.Context) (bool, error)
	}
	return []resumedKind{
		lockerKind("Mutex", func(c *Client, name string) (locker, error) { return c.NewMutex(name) }),
		lockerKind("FencedMutex", func(c *Client, name string) (locker, error) { return c.NewMutex(name, WithFencing()) }),
		lockerKind("FixedLease", func(c *Client, name string) (locker, error) { return c.NewMutex(name, WithLease(20*time.Second)) }),
		lockerKind("FairMutex", func(c *Client, name string) (locker, error) { return c.NewFairMutex(name) }),
		lockerKind("SpinLock", func(c *Client, name string) (locker, error) { return c.NewSpinLock(name) }),
		lockerKind("ReadLock", func(c *Client, name string) (locker, error) {
			rw, err := c.NewRWMutex(name)
			if err != nil {
				return nil, err
			}
			return rw.ReadLock(), nil
		}),
		lockerKind("WriteLock", func(c *Client, name string) (locker, error) {
			rw, err := c.NewRWMutex(name, WithFencing())
			if err != nil {
				return nil, err
			}
			return rw.WriteLock(), nil
		}),
		{"Permit", func(t *testing.T, ctx context.Context, c *Client, name string) (context.Context, func()) {
			s, err := c.NewPermitSemaphore(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.TrySetPermits(ctx, 1); err != nil {
				t.Fatal(err)
			}
			pctx, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return pctx, func() {
				if _, err := s.Delete(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"Election", func(t *testing.T, ctx context.Context, c *Client, name string) (context.Context, func()) {
			e, err := c.NewElection(name)
			if err != nil {
				t.Fatal(err)
			}
			leaderCtx, err := e.Campaign(ctx, "v")
			if err != nil {
				t.Fatal(err)
			}
			return leaderCtx, func() {
				if _, err := e.m.ForceUnlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
}

// TestResumedHolderSeesItsLeaseOver: after a pause past the lease, the
// first Err of the lock context (Election: the leader context; a
// PermitSemaphore: the permit context) is not nil, its cause says the
// lease ran out, and Done is closed, in every round, before any timer has
// run. A fenced lock context's first look is FenceOf, which ends it too
// and still hands out the token (the storage refuses it once a newer
// holder has written).
func TestResumedHolderSeesItsLeaseOver(t *testing.T) {
	for _, k := range resumedKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := boundedCtx(t, time.Minute)
			expired := make(chan LostCause, 4) // the Lost reports of this round's hold
			c := newClient(t, nil, WithLogger(slog.New(slog.DiscardHandler)), WithObserver(Observer{
				Lost: func(_ LockInfo, e LostInfo) {
					select {
					case expired <- e.Cause:
					default: // more reports than rounds: the count below says so
					}
				},
			}))
			name := lockName(t)
			live, fenced := 0, false // rounds whose first look after the pause found the lock context standing
			for round := range resumeRounds {
				lctx, clear := k.take(t, ctx, c, name)
				if err := lctx.Err(); err != nil {
					t.Fatalf("round %d: the lock context ended before the pause: %v", round, context.Cause(lctx))
				}
				back := pauseFor(c, c.cfg.watchdogTimeout+time.Minute)
				fenced = FenceOf(lctx).Token != 0 // for a fenced lock, the first look
				if fenced && registeredHolds(c) != 0 {
					endOverdue(c)
					back()
					t.Fatalf("round %d: FenceOf after the pause left the hold registered", round)
				}
				err := lctx.Err()
				if err == nil {
					live++
					endOverdue(c) // what the timers do when they run
				}
				back()
				select {
				case got := <-expired:
					if got != LostExpired {
						t.Fatalf("round %d: Lost reported %q, want %q", round, got, LostExpired)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("round %d: no Lost report", round)
				}
				if err == nil {
					clear()
					continue
				}
				cause := context.Cause(lctx)
				if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "ran out") {
					t.Fatalf("round %d: cause %v, want ErrLockLost: the lease ran out", round, cause)
				}
				select {
				case <-lctx.Done():
				default:
					t.Fatalf("round %d: Done is open after Err said the lease ran out", round)
				}
				clear()
			}
			if len(expired) != 0 {
				t.Errorf("%d Lost reports more than holds lost", len(expired))
			}
			if live > 0 {
				t.Errorf("the first Err after a pause past the lease was nil in %d of %d rounds (fenced, FenceOf first: %v)", live, resumeRounds, fenced)
			}
		})
	}
}

// TestResumedHolderRacesTheSweep: on resume the expiry timer's goroutine
// may run at the same moment as the holder: its sweep has taken the hold
// out of the registry (or its timer has marked the permit ended) but has
// not cancelled the lock context yet. The holder's look in that window
// must still find the lock context ended.
func TestResumedHolderRacesTheSweep(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c := newClient(t, nil, WithLogger(slog.New(slog.DiscardHandler)))
	name := lockName(t)

	m := mustMutex(t, c, name)
	lctx := mustLock(t, ctx, m)
	back := pauseFor(c, c.cfg.watchdogTimeout+time.Minute)
	lost, _ := c.holds.sweepSome(c.holds.now()) // the sweep, halfway
	err := lctx.Err()
	back()
	if len(lost) != 1 {
		t.Fatalf("the sweep took %d holds, want the Mutex's", len(lost))
	}
	if err == nil {
		t.Error("Err is nil while the sweep has taken the overdue hold but not ended its lock context")
	}
	for _, l := range lost {
		c.ended(l.hd, l.acqs, leaseRanOut(l.hd))
	}
	if _, err := m.ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}

	s, err := c.NewPermitSemaphore(name + ":permits")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	defer s.Delete(ctx)
	pctx, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.permitFrom(pctx)
	if err != nil {
		t.Fatal(err)
	}
	back = pauseFor(c, c.cfg.watchdogTimeout+time.Minute)
	p.mu.Lock()
	p.ended = true // the timer's end, halfway: the context not cancelled yet
	p.mu.Unlock()
	err = pctx.Err()
	back()
	if err == nil {
		t.Error("Err is nil while the permit's timer has ended it but not cancelled its context")
	}
	p.cancel(ErrLockLost)
	c.permits.remove(p)
}

// TestLookDoesNotRunLostHook: the look that finds a hold past its
// deadline ends the lock context at once, but the log line and
// Observer.Lost come from another goroutine: a holder that checks its
// lock context under a mutex that its Lost hook also takes must not
// deadlock.
func TestLookDoesNotRunLostHook(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	var mu sync.Mutex
	lost := make(chan struct{}, 1)
	c := newClient(t, nil, WithLogger(slog.New(slog.DiscardHandler)), WithObserver(Observer{
		Lost: func(LockInfo, LostInfo) {
			mu.Lock()
			defer mu.Unlock()
			lost <- struct{}{}
		},
	}))
	m := mustMutex(t, c, lockName(t))
	lctx := mustLock(t, ctx, m)
	defer m.ForceUnlock(ctx)
	back := pauseFor(c, c.cfg.watchdogTimeout+time.Minute)
	defer back()
	looked := make(chan error, 1)
	mu.Lock()
	go func() { looked <- lctx.Err() }() // the holder, under its own mutex (held here for it)
	select {
	case err := <-looked:
		mu.Unlock()
		if err == nil {
			t.Fatal("Err is nil after a pause past the lease")
		}
	case <-time.After(5 * time.Second):
		mu.Unlock() // let the Lost hook and the look go
		<-looked
		t.Fatal("the look ran the Lost hook, which waited for the mutex its caller held")
	}
	recv(t, lost, 10*time.Second, "the Lost report")
}
