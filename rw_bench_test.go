package dlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRWMutexRead: 8 goroutines on one Client take a lock, read for
// 1 ms (a sleep, as for I/O, so that holders can overlap on two cores) and
// release it, b.N times in all: RWMutex read locks, which readers share,
// against a Mutex, which serialises them. It reports acquisitions per
// second and the wait per acquisition.
func BenchmarkRWMutexRead(b *testing.B) {
	for _, k := range []struct {
		name    string
		newLock func(tb testing.TB, c *Client, name string) Locker
	}{
		{"RWMutex.ReadLock", func(tb testing.TB, c *Client, name string) Locker { return mustRW(tb, c, name).ReadLock() }},
		{"Mutex", func(tb testing.TB, c *Client, name string) Locker { return mustMutex(tb, c, name) }},
	} {
		b.Run(k.name, func(b *testing.B) { benchReaders(b, 8, k.newLock) })
	}
}

func benchReaders(b *testing.B, workers int, newLock func(tb testing.TB, c *Client, name string) Locker) {
	const read = time.Millisecond
	name := lockName(b)
	l := newLock(b, newClient(b, nil), name)
	var (
		mu    sync.Mutex
		waits []time.Duration
		left  atomic.Int64
		wg    sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for left.Add(-1) >= 0 {
				start := time.Now()
				lc, err := l.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				wait := time.Since(start)
				mu.Lock()
				waits = append(waits, wait)
				mu.Unlock()
				time.Sleep(read)
				if err := l.Unlock(lc); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
	report(b, "wait", waits)
}
