package main

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMonoNowIsClockMonotonic: monoNow agrees with CLOCK_MONOTONIC read by
// the system call, so timestamps of different processes compare.
func TestMonoNowIsClockMonotonic(t *testing.T) {
	for range 100 {
		before := monoNow()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		after := monoNow()
		// The system call's reading lies between the two, give or take
		// the calibration error (half a system call).
		if slack := int64(50 * time.Microsecond); ts.Nano() < before-slack || ts.Nano() > after+slack {
			t.Fatalf("CLOCK_MONOTONIC %d outside monoNow's [%d, %d]", ts.Nano(), before, after)
		}
	}
}
