package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The synchronizers run on the Client's transport, as the lock kinds do:
// the reach gate and replica sync apply to them (internal/transport).

// TestSynchronizerUnreachableFailsAtOnce: once a Client has found Redis
// unreachable (its gate is shut), a Semaphore, PermitSemaphore or
// CountDownLatch call fails at once with ErrUnreachable, without sending
// its script, as TryLock does. (The gate's prober dials and may PING
// meanwhile: only scripts are counted.)
func TestSynchronizerUnreachableFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	var d countingDial
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: d.dial, MaxRetries: -1})
	var scripts atomic.Int64
	rdb.AddHook(scriptCounter{&scripts})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	name := lockName(t)
	sem := mustSemaphore(t, c, name+":sem")
	psem := mustPermitSemaphore(t, c, name+":psem")
	latch := mustLatch(t, c, name+":latch")
	d.shut.Store(true)
	// The first call dials and fails: the gate shuts, and that first
	// failure is ErrUnreachable already. Its script must run at most once,
	// so it is not sent again on another connection; but a dial sent
	// nothing, and dialling again and again (for the 5 s retry budget)
	// would only trip go-redis's breaker: the first failed dial ends it.
	start := time.Now()
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("first Semaphore TryAcquire with dials refused: %v, want ErrUnreachable", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("first Semaphore TryAcquire with dials refused took %v (%d dials), want one dial's tries (< 2 s), not the retry budget", took, d.n.Load())
	}
	eventually(t, 5*time.Second, func() error {
		if c.tr.Gate().Err() == nil {
			return errors.New("the gate is open")
		}
		return nil
	})
	calls := map[string]func() error{
		"Semaphore TryAcquire":       func() error { _, err := sem.TryAcquire(ctx, 1); return err },
		"Semaphore Release":          func() error { return sem.Release(ctx, 1) },
		"PermitSemaphore TryAcquire": func() error { _, err := psem.TryAcquire(ctx); return err },
		"PermitSemaphore AddPermits": func() error { return psem.AddPermits(ctx, 1) },
		"CountDownLatch CountDown":   func() error { _, err := latch.CountDown(ctx); return err },
		"CountDownLatch TrySetCount": func() error { _, err := latch.TrySetCount(ctx, 1); return err },
	}
	for what, call := range calls {
		sent := scripts.Load()
		start := time.Now()
		err := call()
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("%s behind the shut gate: %v, want ErrUnreachable", what, err)
		}
		if n := scripts.Load() - sent; n != 0 {
			t.Errorf("%s behind the shut gate sent %d scripts, want none", what, n)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s behind the shut gate took %v, want at once", what, took)
		}
	}
}

// scriptCounter is a go-redis hook that counts the scripts (EVALSHA,
// EVAL) processed, alone or in a pipeline.
type scriptCounter struct{ n *atomic.Int64 }

func (scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h scriptCounter) count(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		h.n.Add(1)
	}
}

// TestSynchronizerReplicaSyncNoReplica: on a master without replicas, a
// Client with WithReplicaSync(1, ...) takes no permit: a TryAcquire of a
// Semaphore or a PermitSemaphore fails with ErrNotReplicated and leaves
// the counts as they were. Writes that are not acquisitions stand and say
// so: TrySetPermits and CountDown report what they did with an error
// wrapping ErrNotReplicated.
func TestSynchronizerReplicaSyncNoReplica(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, newRedis(t), WithReplicaSync(1, 50*time.Millisecond))
	name := lockName(t)

	sem := mustSemaphore(t, c, name+":sem")
	if set, err := sem.TrySetPermits(ctx, 2); !set || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Semaphore TrySetPermits without replicas: %v, %v; want true and ErrNotReplicated", set, err)
	}
	if ok, err := sem.TryAcquire(ctx, 1); ok || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Semaphore TryAcquire without replicas: %v, %v; want false and ErrNotReplicated", ok, err)
	}
	if n, err := sem.AvailablePermits(ctx); err != nil || n != 2 {
		t.Errorf("Semaphore permits after the unreplicated TryAcquire: %d, %v; want 2", n, err)
	}

	psem := mustPermitSemaphore(t, c, name+":psem")
	if set, err := psem.TrySetPermits(ctx, 2); !set || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("PermitSemaphore TrySetPermits without replicas: %v, %v; want true and ErrNotReplicated", set, err)
	}
	if _, err := psem.TryAcquire(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("PermitSemaphore TryAcquire without replicas: %v, want ErrNotReplicated", err)
	}
	eventuallyAvailable(t, psem, 2, 0) // given back in the background, as a lock is

	latch := mustLatch(t, c, name+":latch")
	if set, err := latch.TrySetCount(ctx, 2); !set || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TrySetCount without replicas: %v, %v; want true and ErrNotReplicated", set, err)
	}
	if n, err := latch.CountDown(ctx); n != 1 || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("CountDown without replicas: %d, %v; want 1 (it stands) and ErrNotReplicated", n, err)
	}
	for _, k := range []string{sem.name, psem.name, psem.timeouts, latch.name} {
		c.rdb.Del(ctx, k)
	}
}

// TestSynchronizerAcquireWaitsOutOutage: a waiting Acquire called while
// Redis cannot be reached waits for it as long as its ctx allows, as Lock
// does (TestLockWaitsOutOutage), rather than failing at once with
// ErrUnreachable; it gets its permits once Redis is back.
func TestSynchronizerAcquireWaitsOutOutage(t *testing.T) {
	ctx := context.Background()
	proxy := redistest.NewTestProxy(t, redisAddr)
	var d countingDial
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Dialer: d.dial, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var logs syncBuf
	c := newClient(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	name := lockName(t)
	sem := mustSemaphore(t, c, name+":sem")
	psem := mustPermitSemaphore(t, c, name+":psem")
	if _, err := sem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := psem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d.shut.Store(true)
	proxy.CloseAll()
	eventually(t, 5*time.Second, func() error { // a failed call shuts the gate
		if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, ErrUnreachable) {
			return fmt.Errorf("TryAcquire in an outage: %v", err)
		}
		if c.tr.Gate().Err() == nil {
			return errors.New("the gate is open")
		}
		return nil
	})
	// An Acquire whose ctx ends while it waits at the gate says so, as
	// one whose ctx ends while the semaphore has no permits does.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := sem.Acquire(short, 1); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire whose ctx ended in an outage: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan error, 2)
	go func() {
		err := sem.Acquire(actx, 1)
		if err == nil {
			err = sem.Release(ctx, 1)
		}
		got <- err
	}()
	go func() {
		p, err := psem.Acquire(actx)
		if err == nil {
			err = psem.Release(p)
		}
		got <- err
	}()
	for probes := d.n.Load() + 3; d.n.Load() < probes; { // the prober dials three more times
		select {
		case err := <-got:
			t.Fatalf("Acquire returned while Redis could not be reached: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	d.shut.Store(false)
	for range 2 {
		if err := recv(t, got, 10*time.Second, "an Acquire once Redis was back"); err != nil {
			t.Fatalf("Acquire once Redis was back: %v", err)
		}
	}
	// The PermitSemaphore waited at the gate: it did not retry (and log)
	// every 100 ms through the outage.
	if n := strings.Count(logs.String(), "permit acquire failed"); n > 0 {
		t.Errorf("the waiting PermitSemaphore Acquire retried through the outage %d times, want it waiting at the gate", n)
	}
}

// TestReentryNotHeldUpByWaiters: a Lock that re-enters a lock its owner
// holds goes to Redis at once, even while other Locks of the same Client
// wait for that lock, subscribed: it is not one of them (it waited for
// pollNoExpiry, 1 s, behind them).
func TestReentryNotHeldUpByWaiters(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	m := mustMutex(t, c, lockName(t))
	held := mustLock(t, ctx, m)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		l, err := m.Lock(wctx)
		if err == nil {
			err = m.Unlock(l)
		}
		waited <- err
	}()
	eventually(t, 5*time.Second, func() error { // the other Lock waits, subscribed
		if !c.queues.waited(m.queueKey()) {
			return errors.New("no subscribed waiter yet")
		}
		return nil
	})
	start := time.Now()
	inner, err := m.Lock(held)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= pollNoExpiry/2 {
		t.Errorf("re-entry with a waiter of the same Client queued took %v, want one round trip (the waiters' poll is %v)", took, pollNoExpiry)
	}
	if err := m.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, waited, 10*time.Second, "the waiting Lock"); err != nil {
		t.Fatal(err)
	}
}
