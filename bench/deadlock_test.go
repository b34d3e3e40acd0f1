package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestHotDeadlockDetection: the hot-lock scenario runs with deadlock
// detection on and every waiter holding a lock of its own; it keeps
// mutual exclusion, no Lock fails with ErrDeadlock (one lock has no
// cycle), nothing is left in Redis, and the report prints the row's note
// with the commands per contended wait and the deadlocks reported.
func TestHotDeadlockDetection(t *testing.T) {
	l, err := libByID("dlock-deadlock")
	if err != nil {
		t.Fatal(err)
	}
	h, err := runHot(quickConfig(), l)
	if err != nil {
		t.Fatal(err)
	}
	if h.Acq == 0 || h.Errors > 0 || h.Deadlocks != 0 || h.Overlaps != 0 {
		t.Fatalf("%d acquisitions, %d errors (%s), %d deadlocks, %d overlaps", h.Acq, h.Errors, h.FirstError, h.Deadlocks, h.Overlaps)
	}
	if h.Handoff.N == 0 {
		t.Fatalf("no contended wait in %d acquisitions", h.Acq)
	}
	if h.Left.Keys() != 0 {
		t.Errorf("keys left = %+v, want none (owner locks and wait records gone)", h.Left)
	}
	var out strings.Builder
	r := &report{cfg: quickConfig(), hot: []*hotResult{h}}
	r.writeDeadlockNote(func(format string, args ...any) { fmt.Fprintf(&out, format, args...) })
	if !strings.Contains(out.String(), "Redis commands executed per contended wait (handoff): ") ||
		!strings.Contains(out.String(), "`ErrDeadlock`: 0 ") {
		t.Errorf("note %q", out.String())
	}
	t.Logf("%s", out.String())
}
