package main

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// monoNow returns CLOCK_MONOTONIC in nanoseconds. Every process on the
// machine reads the same clock, so timestamps taken in different worker
// processes can be subtracted. Go's own monotonic reading (time.Now) is
// that clock too, but a time.Time only exposes it relative to another
// reading of the same process; and unix.ClockGettime is a real system call
// (about a microsecond, not the vDSO), too slow for the spin in pause. So
// the process reads CLOCK_MONOTONIC once, next to a time.Now, and adds the
// monotonic time elapsed since.
func monoNow() int64 {
	return monoBase.ns + int64(time.Since(monoBase.t))
}

// monoBase pairs a time.Now with a CLOCK_MONOTONIC reading taken between
// two time.Now calls at most a few microseconds apart.
var monoBase = calibrate()

type monoPair struct {
	t  time.Time
	ns int64
}

func calibrate() monoPair {
	var best monoPair
	span := time.Duration(1<<63 - 1)
	for range 50 {
		var ts unix.Timespec
		t0 := time.Now()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		t1 := time.Now()
		if d := t1.Sub(t0); d < span {
			span, best = d, monoPair{t: t0.Add(d / 2), ns: ts.Nano()}
		}
	}
	return best
}

// burner is a calibrated busy loop: CPU-bound work of a given length
// on an idle core, which takes longer when the core is shared, as real
// work does.
type burner struct{ perIter float64 } // ns per iteration

// sink keeps the compiler from removing the loop.
var sink atomic.Uint64

func spin(n int) {
	x := uint64(n) | 1
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink.Add(x)
}

// newBurner times the loop and keeps the fastest of several runs: the
// speed of an idle core. The bench calibrates once and passes the result
// to every worker, so that every library's critical section is the same
// work.
func newBurner() burner {
	const n = 200_000
	best := time.Duration(1<<63 - 1)
	for range 50 {
		start := time.Now()
		spin(n)
		best = min(best, time.Since(start))
	}
	return burner{perIter: float64(best) / n}
}

// burn works the CPU for about d.
func (b burner) burn(d time.Duration) { spin(int(float64(d) / b.perIter)) }

// sleepUntil sleeps until CLOCK_MONOTONIC reaches t.
func sleepUntil(t int64) {
	if d := time.Duration(t - monoNow()); d > 0 {
		time.Sleep(d)
	}
}

// timeAt returns the wall-clock time (with Go's monotonic reading) at
// which CLOCK_MONOTONIC reaches t, for a ctx deadline.
func timeAt(t int64) time.Time { return time.Now().Add(time.Duration(t - monoNow())) }

// cpuTime returns the CPU time (user plus system) the process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
