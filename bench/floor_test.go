package main

import (
	"testing"
)

// TestFloorRuns: every layout of the floor scenario runs, sends the
// round trips and runs the commands its scripts have (a few more for
// dlock's own background work are let through), and costs Redis some
// CPU.
func TestFloorRuns(t *testing.T) {
	cfg := quickConfig()
	cfg.floorPairs = 200
	want := map[string]struct{ roundTrips, executed float64 }{
		"redisson": {3, 12}, // acquire; unlock; DEL of the latch
		"dlock":    {2, 7},
		"setnx":    {2, 4},
	}
	for _, l := range floorLayouts {
		run, err := runFloor(cfg, l)
		if err != nil {
			t.Fatalf("%s: %v", l.id, err)
		}
		if run.Pairs != cfg.floorPairs {
			t.Fatalf("%s: %d pairs, want %d", l.id, run.Pairs, cfg.floorPairs)
		}
		n, w := float64(run.Pairs), want[l.id]
		if rt, ex := float64(run.RoundTrips)/n, float64(run.Executed)/n; rt < w.roundTrips || rt > w.roundTrips+0.1 || ex < w.executed || ex > w.executed+0.1 {
			t.Errorf("%s: %.2f round trips and %.2f executed per pair, want %v and %v", l.id, rt, ex, w.roundTrips, w.executed)
		}
		if run.RedisCPU <= 0 || run.ClientCPU <= 0 {
			t.Errorf("%s: Redis CPU %v, client CPU %v", l.id, run.RedisCPU, run.ClientCPU)
		}
	}
}
