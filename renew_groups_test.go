package dlock

import (
	"context"
	"testing"
	"time"
)

// TestWatchdogAndFixedLeaseOnOneClient: one Client holds a lock kept by
// the watchdog and another with a fixed lease, both renewed by the same
// script. Each stays in its own renewal group (the script call's lease
// is its group's): the watchdog hold's lease is set again tick after
// tick, and the fixed lease runs down as it was set, never raised nor
// cut to the watchdog's. In one group, the entry the watchdog happens to
// put first would decide the lease of both: the fixed one set to the
// watchdog timeout (cut when it is longer, raised when it is shorter
// than what is left), or the watchdog one only checked until it runs
// out.
func TestWatchdogAndFixedLeaseOnOneClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the watchdog's; a tick every third
		fixed   time.Duration
		watch   time.Duration // inside the fixed lease
		ticks   int           // renewals of the watchdog hold seen at least
	}{
		// About 15 ticks: one that put the fixed hold first would leave
		// the watchdog hold unrenewed, one that put the watchdog hold
		// first would cut the fixed lease to 600 ms.
		{"cut", 600 * time.Millisecond, 8 * time.Second, 3 * time.Second, 3},
		// Ticks at 1 s and 2 s: the first one, with the fixed hold first,
		// leaves the watchdog hold unrenewed, and with the watchdog hold
		// first raises the fixed lease's last 1.5 s to 3 s; the second,
		// the same with 0.5 s left.
		{"raised", 3 * time.Second, 2500 * time.Millisecond, 2200 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const slack = 5 * time.Millisecond // PTTL's milliseconds
			ctx := boundedCtx(t, time.Minute)
			c := newClient(t, nil, WithWatchdogTimeout(tc.timeout))
			name := lockName(t)
			kept := mustMutex(t, c, name+":kept")
			leased := mustMutex(t, c, name+":leased", WithLease(tc.fixed))
			kctx := mustLock(t, ctx, kept)
			before := time.Now()
			lctx := mustLock(t, ctx, leased)
			after := time.Now()

			renewals := 0                  // times the watchdog hold's TTL went up
			last := time.Duration(1 << 62) // no renewal counted at the first read
			for start := time.Now(); time.Since(start) < tc.watch; time.Sleep(10 * time.Millisecond) {
				if kctx.Err() != nil {
					t.Fatalf("the watchdog hold was lost after %v (%d renewals seen): %v", time.Since(start), renewals, context.Cause(kctx))
				}
				if lctx.Err() != nil {
					t.Fatalf("the fixed-lease hold ended after %v, its lease is %v: %v", time.Since(after), tc.fixed, context.Cause(lctx))
				}
				sent := time.Now()
				k := pttl(t, c.rdb, kept.Name())
				l := pttl(t, c.rdb, leased.Name())
				got := time.Now()
				if k <= 0 {
					t.Fatalf("the watchdog hold's key has PTTL %v after %v (%d renewals seen)", k, time.Since(start), renewals)
				}
				if k > last {
					renewals++
				}
				last = k
				// The lease was set between before and after, and read
				// between sent and got: what is left of it lies between
				// these bounds.
				hi, lo := tc.fixed-sent.Sub(after)+slack, tc.fixed-got.Sub(before)-slack
				if l > hi {
					t.Fatalf("the fixed lease of %v was raised: PTTL %v, %v after Lock, at most %v left (the watchdog timeout is %v)", tc.fixed, l, sent.Sub(after), hi, tc.timeout)
				}
				if l < lo {
					t.Fatalf("the fixed lease of %v was cut: PTTL %v, %v after Lock, at least %v left (the watchdog timeout is %v)", tc.fixed, l, got.Sub(before), lo, tc.timeout)
				}
			}
			if renewals < tc.ticks {
				t.Errorf("the watchdog hold's lease was set again %d times in %v, with a tick every %v; want %d at least", renewals, tc.watch, tc.timeout/3, tc.ticks)
			}
			if err := kept.Unlock(kctx); err != nil {
				t.Fatal(err)
			}
			if err := leased.Unlock(lctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
