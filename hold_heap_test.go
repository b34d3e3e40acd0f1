package dlock

import (
	"context"
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
