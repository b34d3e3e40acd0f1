package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// awaitReplicated waits until replica has key: replication is
// asynchronous, and the failover tests that expect a lock to survive must
// not fail it over before it reached the replica.
func awaitReplicated(t *testing.T, ctx context.Context, replica *redistest.Server, key string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if !containsKey(nodeKeys(ctx, replica, key), key) {
			return fmt.Errorf("%s not on the replica %s yet", key, replica.Addr())
		}
		return nil
	})
}

// firstSuccess calls try until it succeeds or timeout passes, and returns
// how long that took.
func firstSuccess(t *testing.T, timeout time.Duration, try func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		if err = try(); err == nil {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no success within %v: %v", timeout, err)
	return 0
}

// watchPromotion polls n until it reports the master role and sends the
// time it first did.
func watchPromotion(ctx context.Context, n *redistest.Server) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			if v, err := n.Do(ctx, "ROLE"); err == nil {
				if r, ok := v.([]any); ok && len(r) > 0 && r[0] == "master" {
					at <- time.Now()
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return at
}

// lockCycle takes and releases m once, waiting at most 2s.
func lockCycle(ctx context.Context, m *Mutex) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	lctx, err := m.TryLock(ctx)
	if err != nil {
		return err
	}
	return m.Unlock(lctx)
}

// failoverCase is what TestFailover needs of a topology: how to fail over
// the master serving a lock, and how to make the topology healthy again.
type failoverCase struct {
	tp topology
	// master and replica return the nodes serving name.
	master, replica func(name string) *redistest.Server
	// failover fails the master over; the returned function, called once
	// the failover is seen through, brings the topology back to health.
	failover func(t *testing.T, master *redistest.Server) (heal func() error)
	// switched reports whether master no longer serves the lock.
	switched func(master *redistest.Server) bool
}

// TestFailover fails over the master serving a lock on a cluster (the
// master frozen with SIGSTOP: the replica is promoted after the node
// timeout) and on a Sentinel setup (SENTINEL FAILOVER), while a holder
// renews the lock with the watchdog and a waiter waits. Clients keep
// working on the new master (a third client times the failover as an
// application sees it), the holder keeps the lock, which reached the
// replica before the failover, and the waiter, whose subscription was on
// the old master, hears the unlock on the new one. SCRIPT FLUSH on the new
// master does not disturb any of them.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	cl, ss := sharedCluster(t), sharedSentinel(t)
	cases := []failoverCase{{
		tp:      clusterTopology(t),
		master:  cl.MasterFor,
		replica: func(name string) *redistest.Server { return cl.ReplicaOf(ctx, cl.MasterFor(name)) },
		failover: func(t *testing.T, master *redistest.Server) func() error {
			master.Pause()
			return func() error {
				master.Resume()
				return cl.WaitHealthy(ctx)
			}
		},
		// The frozen master answers nothing: a lock taken is taken elsewhere.
		switched: func(*redistest.Server) bool { return true },
	}, {
		tp:      sentinelTopology(t),
		master:  func(string) *redistest.Server { return ss.Master() },
		replica: func(string) *redistest.Server { return ss.Replica() },
		failover: func(t *testing.T, _ *redistest.Server) func() error {
			done := make(chan error, 1)
			go func() { done <- ss.Failover(ctx) }()
			return func() error {
				select {
				case err := <-done:
					return err
				case <-time.After(2 * time.Minute):
					return errors.New("the Sentinel failover did not end within 2 minutes")
				}
			}
		},
		switched: func(master *redistest.Server) bool { return ss.Master() != master },
	}, {
		tp:      sentinelPauseTopology(t),
		master:  func(string) *redistest.Server { return ss.Master() },
		replica: func(string) *redistest.Server { return ss.Replica() },
		failover: func(t *testing.T, master *redistest.Server) func() error {
			master.Pause() // down after 1s, then the sentinels fail it over
			return func() error {
				if _, err := ss.AwaitNewMaster(ctx, master); err != nil {
					return err
				}
				master.Resume()
				return ss.Rejoin(ctx, master)
			}
		},
		switched: func(master *redistest.Server) bool { return ss.Master() != master },
	}}
	for _, fc := range cases {
		t.Run(fc.tp.name, func(t *testing.T) { testFailover(t, fc) })
	}
}

func testFailover(t *testing.T, fc failoverCase) {
	ctx := context.Background()
	tp := fc.tp
	name := topoName(t, tp)
	probeName := "{" + name + "}:probe" // same slot, so the same master
	// With a 15s watchdog timeout the lock's TTL never drops below 10s, so
	// a waiter that gets in within 5s of the unlock heard the message.
	holder := newClient(t, tp.redis(t), WithWatchdogTimeout(15*time.Second))
	waiter := newClient(t, tp.redis(t))
	probe := mustMutex(t, newClient(t, tp.redis(t)), probeName, WithLease(10*time.Second))
	mH, mW := mustMutex(t, holder, name), mustMutex(t, waiter, name)

	lH := mustLock(t, ctx, mH)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	gotW := lockAsync(wctx, mW)
	eventually(t, 10*time.Second, func() error { return checkSubscribed(ctx, tp, name) })
	if err := lockCycle(ctx, probe); err != nil { // connect and load the scripts
		t.Fatal(err)
	}
	master := fc.master(name)
	awaitReplicated(t, ctx, fc.replica(name), name)

	promoted := watchPromotion(ctx, fc.replica(name))
	start := time.Now()
	heal := fc.failover(t, master)
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = heal()
		}
	})
	took := firstSuccess(t, 30*time.Second, func() error {
		if err := lockCycle(ctx, probe); err != nil {
			return err
		}
		if !fc.switched(master) {
			return errors.New("old master still in charge")
		}
		return nil
	})
	select {
	case at := <-promoted:
		t.Logf("%s: replica promoted %v after the failover began; a client locked again after %v",
			tp.name, at.Sub(start).Round(10*time.Millisecond), took.Round(10*time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the replica never reported the master role")
	}

	// The new master's script cache is empty anyway (scripts are not
	// replicated); flushing it makes sure every script below meets
	// NOSCRIPT once.
	if _, err := fc.master(name).Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	// The holder renews on the new master and still holds the lock.
	eventually(t, 15*time.Second, func() error {
		if lH.Err() != nil {
			return fmt.Errorf("holder lost the lock: %w", context.Cause(lH))
		}
		n, err := mH.HoldCount(lH)
		if err == nil && n != 1 {
			err = fmt.Errorf("HoldCount = %d", n)
		}
		return err
	})
	select {
	case r := <-gotW:
		t.Fatalf("waiter got in while the lock was held: %v", r.err)
	default:
	}
	released := time.Now()
	if err := mH.Unlock(lH); err != nil {
		t.Fatal(err)
	}
	lW := await(t, gotW, 5*time.Second, "waiter after the unlock on the new master")
	t.Logf("%s: waiter got the lock %v after the unlock", tp.name, time.Since(released).Round(time.Millisecond))
	if err := mW.Unlock(lW); err != nil {
		t.Fatal(err)
	}
	healed = true
	if err := heal(); err != nil {
		t.Fatal(err)
	}
}

// TestSentinelFailoverLosesLock follows the deterministic recipe for a
// lock lost to asynchronous replication: the replica is cut off (it can
// neither stay connected nor resync), two Clients take locks on the master,
// SENTINEL FAILOVER promotes the replica that never saw them, and a second
// client takes the same locks on the new master. Without replica sync the
// test observes the double grant, and the first holder's lock context is
// cancelled with ErrLockLost when its watchdog finds the lock taken. With
// WithReplicaSync the first acquisition already failed with
// ErrNotReplicated and was given back, so nothing is granted twice.
func TestSentinelFailoverLosesLock(t *testing.T) {
	ss := sharedSentinel(t)
	tp := sentinelTopology(t)
	ctx := context.Background()
	base := topoName(t, tp)
	plain, synced := base+":plain", base+":synced"
	holder := newClient(t, tp.redis(t), WithWatchdogTimeout(time.Second))
	careful := tp.syncedClient(t)
	other := newClient(t, tp.redis(t))

	// Healthy: a synced acquisition is acknowledged by the replica.
	mS := mustMutex(t, careful, synced)
	if err := mS.Unlock(mustLock(t, ctx, mS)); err != nil {
		t.Fatal(err)
	}

	old := ss.Master()
	if err := redistest.CutOffReplicas(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = redistest.RestoreReplicas(ctx, old) })

	mA := mustMutex(t, holder, plain)
	lA := mustLock(t, ctx, mA) // granted; never reaches the replica
	_, err := mS.Lock(ctx)
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("synced Lock with the replica cut off: %v, want ErrNotReplicated", err)
	}
	t.Logf("synced Lock: %v", err)
	if keys := nodeKeys(ctx, old, synced); containsKey(keys, synced) {
		t.Fatalf("the unreplicated acquisition was not given back: %v on the master", keys)
	}

	start := time.Now()
	if err := ss.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER done (new master promoted, old one resynced) in %v", time.Since(start).Round(10*time.Millisecond))
	if err := redistest.RestoreReplicas(ctx, old); err != nil {
		t.Fatal(err)
	}

	// The second client gets the plain lock: granted twice.
	mB := mustMutex(t, other, plain)
	var lB context.Context
	firstSuccess(t, 10*time.Second, func() error {
		lctx, err := mB.TryLock(ctx)
		lB = lctx
		return err
	})
	t.Logf("double grant observed: %q held by the first holder (not released) and by a second client", plain)
	select {
	case <-lA.Done():
		if !errors.Is(context.Cause(lA), ErrLockLost) {
			t.Fatalf("first holder's lock context ended with %v, want ErrLockLost", context.Cause(lA))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first holder not told within 5s that its lock was lost")
	}
	if err := mB.Unlock(lB); err != nil {
		t.Fatal(err)
	}
	// The synced lock was never granted, so the second client gets it with
	// nobody believing they hold it.
	mB2 := mustMutex(t, other, synced)
	if err := mB2.Unlock(mustLock(t, ctx, mB2)); err != nil {
		t.Fatal(err)
	}
	if err := mA.Unlock(lA); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("first holder's Unlock: %v, want ErrNotHeld", err)
	}
}

// TestClusterReplicaSync: on a cluster, replica sync waits on the master
// serving the lock's slot: an acquisition succeeds while the replica keeps
// up and fails with ErrNotReplicated, leaving no lock behind, while the
// replica is cut off.
func TestClusterReplicaSync(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	name := topoName(t, tp)
	c := tp.syncedClient(t)
	m := mustMutex(t, c, name)
	if err := m.Unlock(mustLock(t, ctx, m)); err != nil {
		t.Fatal(err)
	}
	master := cl.MasterFor(name)
	if err := redistest.CutOffReplicas(ctx, master); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() error {
		restored = true
		if err := redistest.RestoreReplicas(ctx, master); err != nil {
			return err
		}
		return cl.WaitHealthy(ctx)
	}
	t.Cleanup(func() {
		if !restored {
			_ = restore()
		}
	})
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryLock with the replica cut off: %v, want ErrNotReplicated", err)
	}
	if keys := nodeKeys(ctx, master, name); containsKey(keys, name) {
		t.Fatalf("the unreplicated acquisition was not given back: %v", keys)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(mustLock(t, ctx, m)); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaSyncScriptFlush: replica sync sends the acquire script in a
// pipeline, where go-redis does not fall back from EVALSHA to EVAL by
// itself; an emptied script cache (SCRIPT FLUSH, or a failover to a replica
// that never loaded the script) must still work.
func TestReplicaSyncScriptFlush(t *testing.T) {
	for _, tp := range []topology{clusterTopology(t), sentinelTopology(t)} {
		t.Run(tp.name, func(t *testing.T) {
			ctx := context.Background()
			name := topoName(t, tp)
			m := mustMutex(t, tp.syncedClient(t), name)
			for _, n := range tp.nodes() {
				if _, err := n.Do(ctx, "SCRIPT", "FLUSH"); err != nil && !redis.HasErrorPrefix(err, "READONLY") {
					t.Fatal(err)
				}
			}
			if err := m.Unlock(mustLock(t, ctx, m)); err != nil {
				t.Fatal(err)
			}
			exists := false
			for _, n := range tp.nodes() {
				if v, err := n.Do(ctx, "SCRIPT", "EXISTS", scripts.LockAcquire.Hash()); err == nil {
					exists = exists || fmt.Sprint(v) == "[1]"
				}
			}
			if !exists {
				t.Fatal("the acquire script was not loaded again")
			}
		})
	}
}

// TestRestartUnderWaiter restarts a Redis server (without persistence, so
// the lock is gone) while a client waits for a lock: the waiter's
// subscription connection is re-established, the resubscription wakes it,
// and it takes the now free lock long before the holder's lease would have
// run out; the holder's watchdog reports the lock lost. With the server
// down for good, a waiting Lock ends with an error when its ctx ends.
func TestRestartUnderWaiter(t *testing.T) {
	ctx := context.Background()
	srv := redistest.NewServer(t)
	rdb := func() *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	name := "restart:" + t.Name()
	// The lock's TTL stays above 10s: a waiter in within 6s was woken.
	holder := newClient(t, rdb(), WithWatchdogTimeout(15*time.Second))
	waiter := newClient(t, rdb())
	mH, mW := mustMutex(t, holder, name), mustMutex(t, waiter, name)
	lH := mustLock(t, ctx, mH)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	gotW := lockAsync(wctx, mW)
	waitForWaiter(t, waiter, name) // subscribed, as Redis confirms

	restarted := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	lW := await(t, gotW, 6*time.Second, "waiter after the restart")
	t.Logf("waiter got the lock %v after the restart", time.Since(restarted).Round(time.Millisecond))
	select {
	case <-lH.Done():
		if !errors.Is(context.Cause(lH), ErrLockLost) {
			t.Fatalf("holder's lock context ended with %v, want ErrLockLost", context.Cause(lH))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("holder not told within 10s that the restart lost its lock")
	}
	if err := mW.Unlock(lW); err != nil {
		t.Fatal(err)
	}

	// The server goes away while someone waits: the wait ends with ctx.
	_ = mustLock(t, ctx, mH)
	wctx2, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	gotW = lockAsync(wctx2, mW)
	eventually(t, 10*time.Second, func() error {
		if n := waiter.hub.Waiters(prefixName(channelPrefix, name)); n != 1 {
			return fmt.Errorf("%d waiters", n)
		}
		return nil
	})
	srv.Kill()
	select {
	case r := <-gotW:
		if r.err == nil {
			t.Fatal("waiter got the lock from a dead server")
		}
		t.Logf("waiter with the server down: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter still waiting 10s after the server died and 7s after its ctx ended")
	}
}

// TestReplicaSyncOptions: WithReplicaSync refuses values it cannot honour:
// a negative count, a timeout the Redis client would cut short (WAIT runs
// in a pipeline under the client's read timeout), and clients without a
// node connection to run WAIT on.
func TestReplicaSyncOptions(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: redisAddr, ReadTimeout: time.Second})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr}})
	t.Cleanup(func() { _, _ = plain.Close(), ring.Close() })
	for i, tc := range []struct {
		rdb redis.UniversalClient
		opt Option
	}{
		{plain, WithReplicaSync(-1, time.Millisecond)},
		{plain, WithReplicaSync(1, 0)},
		{plain, WithReplicaSync(1, time.Second)},
		{ring, WithReplicaSync(1, time.Millisecond)},
	} {
		if c, err := New(tc.rdb, tc.opt); !errors.Is(err, ErrInvalidOption) {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("case %d, New(%T, ...): %v, want ErrInvalidOption", i, tc.rdb, err)
		}
	}
	c, err := New(plain, WithReplicaSync(1, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

// TestSentinelFailoverGrantsPermitOnce is TestSentinelFailoverLosesLock for
// a PermitSemaphore of one permit. With the replica cut off, a plain
// TryAcquire is granted on the master alone, while a synced one
// (WithReplicaSync) fails with ErrNotReplicated and leaves no permit held
// there. After the failover the plain permit is granted again to another
// client (twice in all), and the synced semaphore is as it was before:
// one permit available, none held.
func TestSentinelFailoverGrantsPermitOnce(t *testing.T) {
	ss := sharedSentinel(t)
	tp := sentinelTopology(t)
	ctx := context.Background()
	base := topoName(t, tp)
	plain, synced := base+":plain", base+":synced"
	holder := newClient(t, tp.redis(t), WithWatchdogTimeout(time.Second))
	careful := tp.syncedClient(t)
	other := newClient(t, tp.redis(t))

	// Healthy: both set up and replicated, a synced permit acknowledged.
	sS := mustPermitSemaphore(t, careful, synced)
	for _, s := range []*PermitSemaphore{sS, mustPermitSemaphore(t, careful, plain)} {
		if set, err := s.TrySetPermits(ctx, 1); !set || err != nil {
			t.Fatalf("TrySetPermits of %q: %v, %v", s.name, set, err)
		}
	}
	p, err := sS.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("synced TryAcquire with the replica up: %v", err)
	}
	if err := sS.Release(p); err != nil {
		t.Fatal(err)
	}

	old := ss.Master()
	if err := redistest.CutOffReplicas(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = redistest.RestoreReplicas(ctx, old) })

	sA := mustPermitSemaphore(t, holder, plain)
	pA, err := sA.TryAcquire(ctx) // granted; never reaches the replica
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sS.TryAcquire(ctx); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("synced TryAcquire with the replica cut off: %v, want ErrNotReplicated", err)
	}
	if n, err := old.Do(ctx, "ZCARD", sS.timeouts); err != nil || n != int64(0) {
		t.Fatalf("permits held on the master after the unreplicated TryAcquire: %v, %v; want 0", n, err)
	}

	start := time.Now()
	if err := ss.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER done in %v", time.Since(start).Round(10*time.Millisecond))
	if err := redistest.RestoreReplicas(ctx, old); err != nil {
		t.Fatal(err)
	}

	// The plain permit is granted again: twice in all.
	sB := mustPermitSemaphore(t, other, plain)
	var pB context.Context
	firstSuccess(t, 10*time.Second, func() error {
		pctx, err := sB.TryAcquire(ctx)
		pB = pctx
		return err
	})
	t.Logf("double grant observed: the one permit of %q held by the first holder and by a second client", plain)
	if err := sB.Release(pB); err != nil {
		t.Fatal(err)
	}
	_ = sA.Release(pA) // lost with the failover: ErrNotHeld, or released

	// The synced semaphore on the new master: as before the cut-off.
	sO := mustPermitSemaphore(t, other, synced)
	firstSuccess(t, 10*time.Second, func() error {
		avail, err := sO.AvailablePermits(ctx)
		if err != nil {
			return err
		}
		held, err := sO.AcquiredPermits(ctx)
		if err != nil {
			return err
		}
		if avail != 1 || held != 0 {
			t.Fatalf("synced semaphore on the new master: %d available, %d held; want 1 and 0", avail, held)
		}
		return nil
	})
}
