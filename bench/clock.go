package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// spinTail is the part of a pause spent spinning rather than sleeping: the
// usual overshoot of nanosleep on this kind of machine.
const spinTail = 100 * time.Microsecond

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

// pause blocks the goroutine for d, the simulated work of a worker. It
// sleeps with nanosleep and spins the last spinTail: time.Sleep cannot be
// used because the Go runtime rounds sleeps below 1 ms up to about 1.1 ms,
// which would turn a 200 µs critical section into a 1 ms one.
func pause(d time.Duration) {
	end := monoNow() + int64(d)
	if d > spinTail {
		ts := unix.NsecToTimespec(int64(d - spinTail))
		_ = unix.Nanosleep(&ts, nil)
	}
	for monoNow() < end {
	}
}

// sleepUntil sleeps until CLOCK_MONOTONIC reaches t.
func sleepUntil(t int64) {
	if d := time.Duration(t - monoNow()); d > 0 {
		time.Sleep(d)
	}
}

// cpuTime returns the CPU time (user plus system) the process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
