package main

import (
	"testing"
	"time"
)

// TestSemRuns: the permit semaphore scenario runs for every contender,
// never has more permits held than there are, and takes every wake-up
// sample.
func TestSemRuns(t *testing.T) {
	cfg := quickConfig()
	cfg.sem.quick()
	cfg.sem.window, cfg.sem.samples = 500*time.Millisecond, 5
	for _, l := range cfg.sem.libs {
		r, err := runSem(cfg, l)
		if err != nil {
			t.Fatal(err)
		}
		if r.Errors > 0 || r.Acq == 0 {
			t.Fatalf("%s: %d acquisitions, %d errors (%s)", l.id, r.Acq, r.Errors, r.FirstError)
		}
		if r.MaxHeld < 1 || r.MaxHeld > r.Permits {
			t.Errorf("%s: %d permits held at once, of %d", l.id, r.MaxHeld, r.Permits)
		}
		if r.Wakeup.N != 5 || r.Wakeup.P50 <= 0 {
			t.Errorf("%s: wake-up %+v, want 5 samples", l.id, r.Wakeup)
		}
		checkCeiling(t, l.id, r, cfg.sem.hold)
		if r.RoundTrips < 2 {
			t.Errorf("%s: %.2f round trips per acquisition, want at least acquire and release", l.id, r.RoundTrips)
		}
	}
}

// TestSemThinkBusy: with think time and a CPU-bound hold the scenario
// runs, and the hold measured is the work's.
func TestSemThinkBusy(t *testing.T) {
	cfg := quickConfig()
	cfg.sem.quick()
	cfg.sem.window, cfg.sem.samples = 500*time.Millisecond, 1
	cfg.sem.think, cfg.sem.busy, cfg.sem.hold = time.Millisecond, true, 300*time.Microsecond
	l, err := semLibByID("lua-zset-poll")
	if err != nil {
		t.Fatal(err)
	}
	r, err := runSem(cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors > 0 || r.Acq == 0 {
		t.Fatalf("%d acquisitions, %d errors (%s)", r.Acq, r.Errors, r.FirstError)
	}
	checkCeiling(t, l.id, r, cfg.sem.hold)
}

// checkCeiling: the hold measured is at least the hold asked for, and no
// library beats permits / hold (a margin for the window's edges).
func checkCeiling(t *testing.T, lib string, r *semResult, hold time.Duration) {
	t.Helper()
	if r.HoldMean < int64(hold) {
		t.Errorf("%s: hold mean %v, want at least %v", lib, time.Duration(r.HoldMean), hold)
	}
	if r.Ceiling <= 0 || r.PerSec > 1.1*r.Ceiling {
		t.Errorf("%s: %.0f acquisitions/s over a ceiling of %.0f", lib, r.PerSec, r.Ceiling)
	}
}
