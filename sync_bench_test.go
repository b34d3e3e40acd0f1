package dlock

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// BenchmarkPermitAcquireRelease is the uncontended cost of one
// PermitSemaphore Acquire plus Release (two scripts).
func BenchmarkPermitAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := mustPermitSemaphore(b, newClient(b, nil), lockName(b))
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p, err := s.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSemaphoreAcquireRelease is the same for a counting Semaphore.
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := mustSemaphore(b, newClient(b, nil), lockName(b))
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.Acquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSemaphoreWakeup measures, per op, the time from a release to
// the acquisition by a waiter on another Client that was waiting for the
// only permit: dlock's push wake-up against the alternative a user would
// write without pub/sub, the same Lua counter polled every 10 ms.
func BenchmarkSemaphoreWakeup(b *testing.B) {
	ctx := context.Background()
	b.Run("push", func(b *testing.B) {
		name := lockName(b)
		holder := mustSemaphore(b, newClient(b, nil), name)
		wc := newClient(b, nil)
		waiter := mustSemaphore(b, wc, name)
		benchWakeup(b, holder, func() error { return waiter.Acquire(ctx, 1) }, func() { waitForSyncWaiters(b, wc, waiter.channel, 1) })
	})
	b.Run("poll-10ms", func(b *testing.B) {
		name := lockName(b)
		holder := mustSemaphore(b, newClient(b, nil), name)
		rdb := newRedis(b)
		polling := make(chan struct{}, 1)
		benchWakeup(b, holder, func() error {
			for first := true; ; first = false {
				ok, err := scripts.SemAcquire.Run(ctx, rdb, []string{name}, 1).Int()
				if err != nil || ok == 1 {
					return err
				}
				if first {
					polling <- struct{}{}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, func() { <-polling })
	})
}

// benchWakeup: per op, the waiter waits for the holder's permit, and the
// time from the holder's Release to the waiter's acquisition is measured
// (ns/op includes a random pause of 0-10 ms before the release).
func benchWakeup(b *testing.B, holder *Semaphore, acquire func() error, waiting func()) {
	ctx := context.Background()
	if err := holder.AddPermits(ctx, 1); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for b.Loop() {
		if err := holder.Acquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			if err := acquire(); err != nil {
				b.Error(err)
			}
			got <- time.Now()
		}()
		waiting()
		// Release at a random moment of the poller's 10 ms cycle (for
		// both, so the two see the same workload).
		time.Sleep(rand.N(10 * time.Millisecond))
		released := time.Now()
		if err := holder.Release(ctx, 1); err != nil {
			b.Fatal(err)
		}
		total += (<-got).Sub(released)
		if err := holder.Release(ctx, 1); err != nil { // the waiter's permit
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-wakeup/op")
}
