package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mustRW makes an RWMutex or fails the test.
func mustRW(t testing.TB, c *Client, name string, opts ...LockOption) *RWMutex {
	t.Helper()
	rw, err := c.NewRWMutex(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// rwWaiter starts a Lock on l in a goroutine and waits until some waiter
// of c is subscribed to the read-write lock's channel. It returns a channel
// that gets the lock context (nil after an error, reported to t).
func rwWaiter(t *testing.T, ctx context.Context, c *Client, l interface {
	Lock(context.Context) (context.Context, error)
}, name string, waiters int) <-chan lockResult {
	t.Helper()
	got := lockAsync(ctx, l)
	ch := prefixName(rwChannelPrefix, name)
	eventually(t, 5*time.Second, func() error {
		if n := c.hub.Waiters(ch); n < waiters {
			return fmt.Errorf("%d waiters, want %d", n, waiters)
		}
		return nil
	})
	waitForSubscriber(t, c, ch)
	return got
}

// TestRWReadersShareWritersExclude: readers and writers on two Clients.
// Readers overlap (the test measures how many hold at once); a writer
// never holds together with a reader or another writer.
func TestRWReadersShareWritersExclude(t *testing.T) {
	name := lockName(t)
	noChannelsLeft(t, name)
	const clients, readers, writers, rounds = 2, 6, 2, 15
	var (
		wg                 sync.WaitGroup
		reading, writing   atomic.Int32
		maxReaders         atomic.Int32
		violations, writes atomic.Int32
	)
	work := func() { time.Sleep(2 * time.Millisecond) }
	for range clients {
		rw := mustRW(t, newClient(t, nil), name)
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for range rounds {
					l, err := rw.ReadLock().Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					n := reading.Add(1)
					for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
					}
					if writing.Load() != 0 {
						violations.Add(1)
					}
					work()
					reading.Add(-1)
					if err := rw.ReadLock().Unlock(l); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for range rounds {
					l, err := rw.WriteLock().Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if writing.Add(1) != 1 || reading.Load() != 0 {
						violations.Add(1)
					}
					writes.Add(1)
					work()
					writing.Add(-1)
					if err := rw.WriteLock().Unlock(l); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	awaitGroup(t, &wg, 2*time.Minute, "the readers and writers")
	t.Logf("at most %d readers held the lock at once; %d writes", maxReaders.Load(), writes.Load())
	if violations.Load() != 0 {
		t.Errorf("%d times a writer held the lock together with another holder", violations.Load())
	}
	if maxReaders.Load() < 2 {
		t.Errorf("readers never overlapped (at most %d at once)", maxReaders.Load())
	}
	if writes.Load() != clients*writers*rounds {
		t.Errorf("%d writes, want %d", writes.Load(), clients*writers*rounds)
	}
}

func TestRWReentrancy(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	rw := mustRW(t, c, name)
	r, w := rw.ReadLock(), rw.WriteLock()

	r1 := mustLock(t, ctx, r)
	r2 := mustLock(t, r1, r)
	if n, err := r.HoldCount(r2); n != 2 || err != nil {
		t.Fatalf("read HoldCount = %d, %v; want 2", n, err)
	}
	// Redis has one read hold of the owner (the Client counts
	// re-entries): field 1 and hold key 1, with its lease.
	owner, _ := ownerFrom(r1, c)
	if n, err := c.rdb.HGet(ctx, name, owner).Int(); n != 1 || err != nil {
		t.Errorf("owner's read count in Redis = %d, %v; want 1", n, err)
	}
	if d, err := c.rdb.PTTL(ctx, holdKeyPrefix(name, owner)+":1").Result(); d <= 0 || err != nil {
		t.Errorf("read hold key has no TTL (%v, %v)", d, err)
	}
	if n, err := c.rdb.Exists(ctx, holdKeyPrefix(name, owner)+":2").Result(); n != 0 || err != nil {
		t.Errorf("a second hold key for a re-entry (%d, %v)", n, err)
	}
	if err := r.Unlock(r2); err != nil {
		t.Fatal(err)
	}
	if n, err := r.HoldCount(r1); n != 1 || err != nil {
		t.Fatalf("read HoldCount = %d, %v after one Unlock; want 1", n, err)
	}
	if err := r.Unlock(r1); err != nil {
		t.Fatal(err)
	}
	if isLocked(t, r) {
		t.Fatal("still locked after the last read Unlock")
	}

	w1 := mustLock(t, ctx, w)
	w2 := mustLock(t, w1, w)
	if n, err := w.HoldCount(w2); n != 2 || err != nil {
		t.Fatalf("write HoldCount = %d, %v; want 2", n, err)
	}
	if mode, err := c.rdb.HGet(ctx, name, "mode").Result(); mode != "write" || err != nil {
		t.Errorf("mode = %q, %v; want write", mode, err)
	}
	if err := w.Unlock(w2); err != nil {
		t.Fatal(err)
	}
	if !isLocked(t, w) {
		t.Fatal("lock freed before the last write Unlock")
	}
	if err := w.Unlock(w1); err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(w1); !errors.Is(err, ErrNotHeld) {
		t.Errorf("extra write Unlock: %v, want ErrNotHeld", err)
	}
	if err := r.Unlock(w1); !errors.Is(err, ErrNotHeld) {
		t.Errorf("read Unlock with a write lock context: %v, want ErrNotHeld", err)
	}
	if n := c.watchdog.Len(); n != 0 {
		t.Errorf("watchdog still renews %d locks", n)
	}
}

// TestRWDowngrade: the writer takes a read lock with its write lock
// context; after the write unlock the lock is a read lock that other
// readers share (and are woken for), while writers still wait.
func TestRWDowngrade(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	rw := mustRW(t, c, name)
	oc := newClient(t, nil)
	other := mustRW(t, oc, name)

	wl := mustLock(t, ctx, rw.WriteLock())
	rl := mustLock(t, wl, rw.ReadLock()) // downgrade: allowed
	if _, err := other.ReadLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another reader while the write lock is held: %v", err)
	}
	got := rwWaiter(t, ctx, oc, other.ReadLock(), name, 1)
	if err := rw.WriteLock().Unlock(wl); err != nil {
		t.Fatal(err)
	}
	if mode, err := c.rdb.HGet(ctx, name, "mode").Result(); mode != "read" || err != nil {
		t.Errorf("mode after the write unlock = %q, %v; want read", mode, err)
	}
	ol := await(t, got, 5*time.Second, "waiting reader after the writer downgraded")
	if _, err := other.WriteLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("a writer while readers hold: %v", err)
	}
	if err := rw.ReadLock().Unlock(rl); err != nil {
		t.Fatal(err)
	}
	if err := other.ReadLock().Unlock(ol); err != nil {
		t.Fatal(err)
	}
	if isLocked(t, rw.ReadLock()) {
		t.Error("still locked after every Unlock")
	}
}

// TestRWUpgradeRefused: a read lock's owner asking for the write lock gets
// ErrUpgrade at once, from Lock and TryLock, instead of waiting for itself.
func TestRWUpgradeRefused(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	rw := mustRW(t, newClient(t, nil), name)
	rl := mustLock(t, ctx, rw.ReadLock())
	start := time.Now()
	bounded, cancel := context.WithTimeout(rl, 5*time.Second) // carries the reader's owner
	defer cancel()
	if _, err := rw.WriteLock().Lock(bounded); !errors.Is(err, ErrUpgrade) {
		t.Fatalf("Lock: %v, want ErrUpgrade", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ErrUpgrade after %v, not at once", d)
	}
	if _, err := rw.WriteLock().TryLock(rl); !errors.Is(err, ErrUpgrade) || errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock: %v, want ErrUpgrade only", err)
	}
	// Another owner simply waits for the reader.
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	if _, err := rw.WriteLock().Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("another owner's write Lock: %v, want a timeout", err)
	}
	if err := rw.ReadLock().Unlock(rl); err != nil {
		t.Fatal(err)
	}
	wl := mustLock(t, ctx, rw.WriteLock())
	if err := rw.WriteLock().Unlock(wl); err != nil {
		t.Fatal(err)
	}
}

// TestRWWriteUnlockWakesAllReaders: one write unlock lets every waiting
// reader in at once; they would otherwise wait out the 30 s lease.
func TestRWWriteUnlockWakesAllReaders(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	writer := mustRW(t, newClient(t, nil), name)
	wl := mustLock(t, ctx, writer.WriteLock())
	const perClient = 2
	var gots []<-chan lockResult
	var readers []*RWMutex
	for range 2 {
		c := newClient(t, nil)
		rw := mustRW(t, c, name)
		for i := range perClient {
			gots = append(gots, rwWaiter(t, ctx, c, rw.ReadLock(), name, i+1))
			readers = append(readers, rw)
		}
	}
	if err := writer.WriteLock().Unlock(wl); err != nil {
		t.Fatal(err)
	}
	var held []context.Context
	timeout := time.After(5 * time.Second)
	for _, got := range gots {
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatal(r.err)
			}
			held = append(held, r.lctx)
		case <-timeout:
			t.Fatalf("%d of %d readers woken by the write unlock", len(held), len(gots))
		}
	}
	// They all hold at once.
	owner, _ := ownerFrom(held[0], readers[0].read.c)
	if n, err := writer.read.c.rdb.HLen(ctx, name).Result(); n != int64(len(gots)+1) || err != nil {
		t.Errorf("lock hash has %d fields (%v), want mode and %d readers (one is %s)", n, err, len(gots), owner)
	}
	for i, l := range held {
		if l != nil {
			if err := readers[i].ReadLock().Unlock(l); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestRWReadLeaseExpiry: a read hold with a fixed lease runs out and its
// holder is told; the lock lives as long as its longest-living read hold,
// and a waiting writer gets in when the last one runs out.
func TestRWReadLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	long := mustRW(t, c, name, WithLease(3*time.Second))
	short := mustRW(t, c, name, WithLease(400*time.Millisecond))
	ll := mustLock(t, ctx, long.ReadLock())
	sl := mustLock(t, ctx, short.ReadLock())
	if ttl, err := short.ReadLock().TTL(ctx); err != nil || ttl < 2*time.Second {
		t.Errorf("TTL %v after a short read hold: it must follow the longest (3 s)", ttl)
	}
	// With the long hold gone, the lock follows the short one.
	if err := long.ReadLock().Unlock(ll); err != nil {
		t.Fatal(err)
	}
	if ttl, err := short.ReadLock().TTL(ctx); err != nil || ttl <= 0 || ttl > 400*time.Millisecond {
		t.Errorf("TTL %v after the long hold's unlock, want (0, 400ms]", ttl)
	}
	wc := newClient(t, nil)
	writer := mustRW(t, wc, name)
	start := time.Now()
	got := rwWaiter(t, ctx, wc, writer.WriteLock(), name, 1)
	awaitDone(t, sl, 5*time.Second, "read lock context at the end of its lease")
	if !errors.Is(context.Cause(sl), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(sl))
	}
	select {
	case r := <-got:
		t.Logf("writer got the lock %v after it started waiting", time.Since(start))
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := writer.WriteLock().Unlock(r.lctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("writer did not get the lock after the read lease ran out")
	}
	if err := short.ReadLock().Unlock(sl); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock after the lease: %v, want ErrNotHeld", err)
	}
}

// TestRWWatchdogRenewsOnlyOwnReadHolds: the watchdog keeps this Client's
// read hold alive and leaves another reader's hold alone, so a reader that
// died (here one written by a Java client with a 400 ms lease) runs out
// instead of living on as a zombie (Redisson PR #7098). Once the live
// reader leaves, the lock is free.
func TestRWWatchdogRenewsOnlyOwnReadHolds(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	// The Go reader's lease is slack for a loaded machine (a renewal
	// late by 2/3 of it loses the hold); the Java reader's 400 ms must run
	// out while the Go reader holds.
	const timeout = time.Second
	c := newClient(t, nil, WithWatchdogTimeout(timeout))
	rw := mustRW(t, c, name)
	java := newJVM(t, 400*time.Millisecond).lock(javaReadLock, name)
	if ok, _, err := java.attempt(ctx, 7, 400*time.Millisecond, 0); !ok || err != nil {
		t.Fatalf("java read lock: %v %v", ok, err)
	}
	rl := mustLock(t, ctx, rw.ReadLock())
	owner, _ := ownerFrom(rl, c)
	javaHold := holdKeyPrefix(name, java.owner(7)) + ":1"
	goHold := holdKeyPrefix(name, owner) + ":1"
	eventually(t, 5*time.Second, func() error {
		if n, err := c.rdb.Exists(ctx, javaHold).Result(); n != 0 || err != nil {
			return fmt.Errorf("the dead reader's hold is still alive (%v)", err)
		}
		return nil
	})
	// Well past both leases the Go reader still holds.
	for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(timeout / 10) {
		if rl.Err() != nil {
			t.Fatalf("read lock context ended: %v", context.Cause(rl))
		}
		if pttl(t, c.rdb, goHold) <= 0 || pttl(t, c.rdb, name) <= 0 {
			t.Fatal("the watchdog did not renew the read hold")
		}
	}
	if _, err := rw.WriteLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("write TryLock while a reader holds: %v", err)
	}
	if err := rw.ReadLock().Unlock(rl); err != nil {
		t.Fatal(err)
	}
	if exists(t, c.rdb, name) {
		t.Errorf("lock still there after the live reader left: %v", c.rdb.HGetAll(ctx, name).Val())
	}
	if n := c.watchdog.Len(); n != 0 {
		t.Errorf("watchdog still renews %d locks", n)
	}
}

// renewals returns an Option that reports each renewal call of a Client's
// watchdog that renewed at least one hold without error on the channel it
// also returns (buffered; a report that finds the buffer full is dropped).
func renewals() (Option, <-chan RenewalInfo) {
	ch := make(chan RenewalInfo, 64)
	return WithObserver(Observer{Renewal: func(r RenewalInfo) {
		if r.Err != nil || r.Locks == 0 {
			return
		}
		select {
		case ch <- r:
		default:
		}
	}}), ch
}

// TestRWReadRenewKeepsLongerReaderHold: the watchdog's renewal of a short
// read hold never shortens the lock hash below another reader's longer
// hold. Reader A (its own Client) holds with a fixed 10 min lease; reader
// B's watchdog renews B's hold to 1 s every 333 ms (a lease that a
// loaded machine's late renewal does not lose). After B's renewals the
// hash must still live about 10 min: a renewal that set it to B's 1 s
// would let a writer in (the hash gone) while A still holds.
func TestRWReadRenewKeepsLongerReaderHold(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	const long = 10 * time.Minute
	ca := newClient(t, nil)
	a := mustRW(t, ca, name, WithLease(long))
	al := mustLock(t, ctx, a.ReadLock())
	obs, renewed := renewals()
	cb := newClient(t, nil, WithWatchdogTimeout(time.Second), obs)
	b := mustRW(t, cb, name)
	bl := mustLock(t, ctx, b.ReadLock())
	// Two renewals of B's hold after its Lock: each ran the renewal
	// script with B's 1 s.
	for i := range 2 {
		recv(t, renewed, 5*time.Second, fmt.Sprintf("renewal %d of the short read hold", i+1))
	}
	// A's hold has long-1 min left at the very least (the test takes
	// seconds); B's renewal is 1 s.
	if d := pttl(t, ca.rdb, name); d < long-time.Minute {
		t.Errorf("lock PTTL %v after the short reader's renewal, want >= %v: the renewal shortened it below the other reader's hold", d, long-time.Minute)
	}
	if bl.Err() != nil || al.Err() != nil {
		t.Fatalf("a read lock context ended: %v / %v", context.Cause(al), context.Cause(bl))
	}
	if _, err := b.WriteLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("write TryLock while two readers hold: %v, want ErrNotObtained", err)
	}
	if err := b.ReadLock().Unlock(bl); err != nil {
		t.Fatal(err)
	}
	if d := pttl(t, ca.rdb, name); d < long-time.Minute {
		t.Errorf("lock PTTL %v after the short reader left, want >= %v", d, long-time.Minute)
	}
	if err := a.ReadLock().Unlock(al); err != nil {
		t.Fatal(err)
	}
}

func TestRWFencing(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	a := mustRW(t, newClient(t, nil), name, WithFencing())
	b := mustRW(t, newClient(t, nil), name, WithFencing())
	next, last := tokenChecker(t)
	for range 2 {
		w := mustLock(t, ctx, a.WriteLock())
		next(w)
		r := mustLock(t, w, a.ReadLock()) // downgrade
		next(r)
		_ = a.WriteLock().Unlock(w)
		r2 := mustLock(t, ctx, b.ReadLock())
		next(r2)
		_ = a.ReadLock().Unlock(r)
		_ = b.ReadLock().Unlock(r2)
	}
	if v := a.read.c.rdb.Get(ctx, prefixName(tokenPrefix, name)).Val(); v != fmt.Sprint(last()) {
		t.Errorf("token key = %s, want %d", v, last())
	}
}

// TestRWForceUnlock: each half force-unlocks the lock only when it is held
// in that half's mode, and wakes the waiters.
func TestRWForceUnlock(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	rw := mustRW(t, newClient(t, nil), name)
	rl := mustLock(t, ctx, rw.ReadLock())
	if ok, err := rw.WriteLock().ForceUnlock(ctx); ok || err != nil {
		t.Errorf("write ForceUnlock of a read lock = %v, %v; want false", ok, err)
	}
	wc := newClient(t, nil)
	other := mustRW(t, wc, name)
	got := rwWaiter(t, ctx, wc, other.WriteLock(), name, 1)
	if ok, err := rw.ReadLock().ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("read ForceUnlock = %v, %v", ok, err)
	}
	wl := await(t, got, 5*time.Second, "waiting writer after ForceUnlock")
	if ok, _ := rw.ReadLock().ForceUnlock(ctx); ok {
		t.Error("read ForceUnlock of a write lock reported a deletion")
	}
	if ok, err := rw.WriteLock().ForceUnlock(ctx); !ok || err != nil {
		t.Errorf("write ForceUnlock = %v, %v", ok, err)
	}
	if err := other.WriteLock().Unlock(wl); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a force-unlocked write lock: %v, want ErrNotHeld", err)
	}
	if err := rw.ReadLock().Unlock(rl); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a force-unlocked read lock: %v, want ErrNotHeld", err)
	}
}

// TestRWOtherKindsExcluded: a read-write lock and a Mutex on one name do
// not share it (the hash without a mode is not a free read-write lock).
func TestRWOtherKindsExcluded(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	m := mustMutex(t, c, name)
	ml := mustLock(t, ctx, m)
	rw := mustRW(t, c, name)
	if _, err := rw.ReadLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("read TryLock on a Mutex's name: %v", err)
	}
	if _, err := rw.WriteLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Errorf("write TryLock on a Mutex's name: %v", err)
	}
	if err := m.Unlock(ml); err != nil {
		t.Fatal(err)
	}
}

func TestNewRWMutexRejectsBadInput(t *testing.T) {
	c := newClient(t, nil)
	for _, name := range []string{"", "a}b", "x{}"} {
		if _, err := c.NewRWMutex(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewRWMutex(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if _, err := c.NewRWMutex("ok", WithLease(-time.Second)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("bad lease: %v, want ErrInvalidOption", err)
	}
	var nilClient *Client
	if _, err := nilClient.NewRWMutex("ok"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil Client: %v", err)
	}
	rw, err := c.NewRWMutex("order:{42}:pay")
	if err != nil {
		t.Fatal(err)
	}
	if rw.Name() != "order:{42}:pay" || rw.ReadLock().Name() != rw.Name() || rw.WriteLock().Name() != rw.Name() {
		t.Errorf("names %q %q %q", rw.Name(), rw.ReadLock().Name(), rw.WriteLock().Name())
	}
	for _, key := range []string{prefixName(rwChannelPrefix, rw.Name()), holdKeyPrefix(rw.Name(), "u:1") + ":1"} {
		if slot(key) != slot(rw.Name()) {
			t.Errorf("key %q is not in the lock's slot", key)
		}
	}
	if got := holdKeyPrefix("plain", "u:1"); got != "{plain}:u:1:rwlock_timeout" {
		t.Errorf("hold key prefix %q is not Redisson's", got)
	}
}
