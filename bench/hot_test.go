package main

import "testing"

// TestAnalyzeHot: acquisitions from several processes are put in one order;
// a waiter's handoff runs from the previous holder's unlock call, a Lock
// that returned before that call is an overlap, and only the window counts.
func TestAnalyzeHot(t *testing.T) {
	events := []acqEvent{
		// Before the window: its release starts the first handoff.
		{G: 0, WaitStart: 50, Acquired: 90, Release: 100},
		// Waited since 60 for the unlock at 100: handoff 30.
		{G: 1, WaitStart: 60, Acquired: 130, Release: 200},
		// Came after the unlock at 200: no handoff.
		{G: 2, WaitStart: 210, Acquired: 220, Release: 300},
		// Returned at 290, before G2 called unlock at 300: overlap.
		{G: 0, WaitStart: 250, Acquired: 290, Release: 400},
		// After the window.
		{G: 1, WaitStart: 350, Acquired: 1200, Release: 1300},
	}
	var r hotResult
	// Waits still going at the end count for the longest wait.
	analyzeHot(&r, events, []int64{100}, 100, 1000, 3)
	if r.Acq != 3 {
		t.Fatalf("acquisitions in the window = %d, want 3", r.Acq)
	}
	if r.Handoff.N != 1 || r.Handoff.P50 != 30 {
		t.Fatalf("handoffs = %+v, want one of 30", r.Handoff)
	}
	if r.Overlaps != 1 {
		t.Fatalf("overlaps = %d, want 1", r.Overlaps)
	}
	if r.MaxWait != 900 {
		t.Fatalf("max wait = %d, want 900 (the wait cut short at the end)", r.MaxWait)
	}
	if r.MinPerG != 1 || r.MaxPerG != 1 {
		t.Fatalf("per goroutine %d–%d, want 1–1", r.MinPerG, r.MaxPerG)
	}
	if want := 3 / (900e-9); r.PerSec != want {
		t.Fatalf("rate = %v, want %v", r.PerSec, want)
	}
}
