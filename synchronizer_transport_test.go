package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

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
	// failure is ErrUnreachable already.
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("first Semaphore TryAcquire with dials refused: %v, want ErrUnreachable", err)
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
	if n, err := psem.AvailablePermits(ctx); err != nil || n != 2 {
		t.Errorf("PermitSemaphore available after the unreplicated TryAcquire: %d, %v; want 2", n, err)
	}
	if n, err := psem.AcquiredPermits(ctx); err != nil || n != 0 {
		t.Errorf("PermitSemaphore held after the unreplicated TryAcquire: %d, %v; want 0", n, err)
	}

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
