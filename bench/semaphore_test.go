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
		if r.RoundTrips < 2 {
			t.Errorf("%s: %.2f round trips per acquisition, want at least acquire and release", l.id, r.RoundTrips)
		}
	}
}
