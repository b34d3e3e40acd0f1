package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestClusterWatchdogFrozenMaster: one Client holds locks in many slots of
// a master frozen with SIGSTOP and a few on the other masters. Every slot
// is its own renewal group, and the go-redis client here reads until its
// 1s ReadTimeout whatever the ctx says; the frozen master's locks
// outnumber the watchdog's parallel renewals. While the master is frozen
// (shorter than the cluster's node timeout, so nothing fails over), the
// locks on the healthy masters keep being renewed, tick after tick, and
// stay held; the frozen master's locks run out on the local clock. A
// watchdog that renewed group after group would stop at the first frozen
// slot and lose every lock queued behind it.
func TestClusterWatchdogFrozenMaster(t *testing.T) {
	const (
		watchdog = 600 * time.Millisecond
		frozenN  = 20
		healthyN = 6
	)
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	c := newClient(t, tp.redis(t), WithWatchdogTimeout(watchdog))
	base := topoName(t, tp)
	frozen := cl.MasterFor(base + ":{0}")
	if frozen == nil {
		t.Fatal("no master for the first lock")
	}

	type held struct {
		m    *Mutex
		lctx context.Context
		key  string
		last time.Duration // TTL seen last: a renewal puts it up again
		seen int           // renewals seen while the master is frozen
	}
	var onFrozen, healthy []*held
	slots := map[uint16]bool{}
	for i := 0; len(onFrozen) < frozenN || len(healthy) < healthyN; i++ {
		if i > 2000 {
			t.Fatalf("only %d locks on the frozen master and %d elsewhere", len(onFrozen), len(healthy))
		}
		name := fmt.Sprintf("%s:{%d}", base, i)
		if slots[slot(name)] {
			continue
		}
		slots[slot(name)] = true
		switch on := cl.MasterFor(name); {
		case on == frozen && len(onFrozen) < frozenN:
			m := mustMutex(t, c, name)
			onFrozen = append(onFrozen, &held{m: m, lctx: mustLock(t, ctx, m), key: name})
		case on != frozen && len(healthy) < healthyN:
			m := mustMutex(t, c, name)
			healthy = append(healthy, &held{m: m, lctx: mustLock(t, ctx, m), key: name})
		}
	}

	frozen.Pause()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			frozen.Resume()
		}
	}
	t.Cleanup(func() {
		resume()
		if err := cl.WaitHealthy(ctx); err != nil {
			t.Error(err)
		}
	})
	// Until the frozen master's locks have run out locally (a whole lease
	// without renewal) and each healthy lock was seen renewed twice, no
	// healthy lock may be lost. 1.5s stays clear of the 2s node timeout.
	eventually(t, 1500*time.Millisecond, func() error {
		for _, h := range healthy {
			if h.lctx.Err() != nil {
				t.Fatalf("%s on a healthy master lost while another master is frozen: %v", h.key, context.Cause(h.lctx))
			}
			ttl, err := h.m.TTL(ctx)
			if err != nil {
				return err
			}
			if h.last > 0 && ttl > h.last {
				h.seen++
			}
			h.last = ttl
		}
		for _, h := range onFrozen {
			if h.lctx.Err() == nil {
				return fmt.Errorf("%s on the frozen master still counts as held", h.key)
			}
		}
		for _, h := range healthy {
			if h.seen < 2 {
				return fmt.Errorf("%s renewed %d times while the master is frozen, want 2", h.key, h.seen)
			}
		}
		return nil
	})
	resume()

	for _, h := range onFrozen {
		if cause := context.Cause(h.lctx); !errors.Is(cause, ErrLockLost) {
			t.Errorf("%s on the frozen master ended with %v, want ErrLockLost", h.key, cause)
		}
	}
	for _, h := range healthy {
		if n, err := h.m.HoldCount(h.lctx); err != nil || n != 1 {
			t.Errorf("%s after the freeze: HoldCount = %d, %v", h.key, n, err)
		}
		if err := h.m.Unlock(h.lctx); err != nil {
			t.Error(err)
		}
	}
}
