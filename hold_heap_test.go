package dlock

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
)

// maxHoldHeap bounds the heap a Client keeps per held lock, handle aside:
// the hold, its acquisition and lock context, the registry's maps, the
// deadline queue, the watchdog's entry and the owner name. Issue 23 asks
// for a million held locks in under 800 bytes each, handles and the
// application's own bookkeeping included; this is dlock's part of it.
// A lock context whose Done nobody called keeps no channel.
const maxHoldHeap = 480

// TestHoldHeap: holding locks costs at most maxHoldHeap bytes of heap
// each, measured after a collection with every lock held (no timing).
func TestHoldHeap(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	const n = 4000
	locks := make([]*Mutex, n)
	for i := range locks {
		locks[i] = mustMutex(t, c, lockName(t)+":"+strconv.Itoa(i))
	}
	held := make([]context.Context, n)
	before := heapAlloc()
	for i, l := range locks {
		held[i] = mustLock(t, ctx, l)
	}
	per := int(heapAlloc()-before) / n
	t.Logf("%d B of heap per held lock", per)
	if per > maxHoldHeap {
		t.Errorf("%d B of heap per held lock, want at most %d", per, maxHoldHeap)
	}
	for i, l := range locks {
		if err := l.Unlock(held[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// heapAlloc is the heap allocated after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLockContextCause: a lock context made without its cancellation
// still ends with its cause, whether Done, context.Cause or a derived
// context asks before the end or after it.
func TestLockContextCause(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	m := mustMutex(t, c, lockName(t))

	// Nothing asked before the end.
	lctx := mustLock(t, ctx, m)
	if err := lctx.Err(); err != nil {
		t.Fatalf("lock context of a held lock: Err = %v", err)
	}
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lctx.Err(), context.Canceled) {
		t.Errorf("after Unlock: Err = %v, want context.Canceled", lctx.Err())
	}
	select {
	case <-lctx.Done():
	default:
		t.Error("after Unlock, a Done asked for the first time is not closed")
	}
	if cause := context.Cause(lctx); !errors.Is(cause, ErrUnlocked) {
		t.Errorf("after Unlock: Cause = %v, want ErrUnlocked", cause)
	}

	// Done and a derived context asked before the end.
	lctx = mustLock(t, ctx, m)
	done := lctx.Done()
	child, cancel := context.WithCancel(lctx)
	defer cancel()
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Error("after Unlock, the Done asked before is not closed")
	}
	<-child.Done()
	if cause := context.Cause(child); !errors.Is(cause, ErrUnlocked) {
		t.Errorf("context derived from a lock context: Cause = %v, want ErrUnlocked", cause)
	}
}

// TestRegistryChain: the holds of one key (read holds of three owners)
// share the registry's chain; each leaves it at its Unlock, from the
// middle, the head or the end, and the holder of the lock is the newest
// hold, none once that is released.
func TestRegistryChain(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	rw, err := c.NewRWMutex(lockName(t))
	if err != nil {
		t.Fatal(err)
	}
	r := rw.ReadLock()
	var held [3]context.Context
	var owners [3]string
	for i := range held {
		held[i] = mustLock(t, ctx, r)
		owners[i], _ = ownerFrom(held[i], c)
	}
	registered := func(i int) bool { return c.holds.held(r.holdKey(owners[i])) != nil }
	other := func() bool { _, _, ok := c.holds.heldByOther(r.queueKey(), "someone else"); return ok }
	if !registered(0) || !registered(1) || !registered(2) || !other() {
		t.Fatalf("three read holds: registered %v %v %v, held by another %v; want all true", registered(0), registered(1), registered(2), other())
	}
	for _, i := range []int{1, 2, 0} { // the middle of the chain, its head, its last
		if err := r.Unlock(held[i]); err != nil {
			t.Fatal(err)
		}
		if registered(i) {
			t.Errorf("read hold %d still registered after its Unlock", i)
		}
		if i == 2 && other() {
			t.Error("the newest hold released: another is still the lock's holder, want none (as before)")
		}
	}
	c.holds.mu.Lock()
	left := len(c.holds.holds)
	c.holds.mu.Unlock()
	if left != 0 {
		t.Errorf("%d keys left in the registry after every Unlock", left)
	}
}
