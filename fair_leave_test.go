package dlock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestFairMidQueueLeaveMovesOnlyThoseBehind: a waiter that leaves from
// the middle of the queue (its ctx ended) moves the waiters behind it up
// one place: their deadlines come one fair wait earlier. The waiters
// ahead of it keep theirs, the head's above all: an earlier deadline
// for the head would have it dropped for dead that much sooner while it
// waits for a holder, and for the one behind it, that much before the
// head's own.
func TestFairMidQueueLeaveMovesOnlyThoseBehind(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	noChannelsLeft(t, name)
	c := newClient(t, nil)
	holder := mustFair(t, c, name)
	held := mustLock(t, ctx, holder)
	m := mustFair(t, newClient(t, nil), name)
	o1, got1 := fairWaiter(t, ctx, m, 1)
	o2, got2 := fairWaiter(t, ctx, m, 2)
	lctx, leave := context.WithCancel(ctx)
	defer leave()
	errc := make(chan error, 1)
	go func() {
		_, err := m.Lock(lctx)
		errc <- err
	}()
	o3 := waitForQueue(t, c.rdb, name, 3)[2]
	o4, got4 := fairWaiter(t, ctx, m, 4)
	before := map[string]int64{}
	for _, o := range []string{o1, o2, o3, o4} {
		d, ok := fairDeadline(t, c.rdb, name, o)
		if !ok {
			t.Fatalf("waiter %s has no deadline", o)
		}
		before[o] = d
	}

	leave()
	if err := recv(t, errc, 10*time.Second, "the Lock that left"); !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the Lock that left: %v", err)
	}
	if q := fairQueue(t, c.rdb, name); !slices.Equal(q, []string{o1, o2, o4}) {
		t.Fatalf("queue after the leave %v, want [%s %s %s]", q, o1, o2, o4)
	}
	if d, ok := fairDeadline(t, c.rdb, name, o3); ok {
		t.Errorf("the waiter that left still has its deadline %d", d)
	}
	wait := DefaultFairWaitTimeout.Milliseconds()
	for _, w := range []struct {
		who, owner string
		want       int64
	}{
		{"the head", o1, before[o1]},
		{"the waiter ahead of the one that left", o2, before[o2]},
		{"the waiter behind the one that left", o4, before[o4] - wait},
	} {
		if got, _ := fairDeadline(t, c.rdb, name, w.owner); got != w.want {
			t.Errorf("deadline of %s: %d -> %d (moved by %d ms), want %d", w.who, before[w.owner], got, got-before[w.owner], w.want)
		}
	}

	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	for _, got := range []<-chan lockResult{got1, got2, got4} {
		if err := m.Unlock(await(t, got, 10*time.Second, "waiter")); err != nil {
			t.Error(err)
		}
	}
}
