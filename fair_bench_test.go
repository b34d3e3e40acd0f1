package dlock

import (
	"fmt"
	"testing"
)

// BenchmarkFairHandoff is BenchmarkHandoff on a FairMutex: 16 goroutines
// on 1 or 2 Clients share one hot fair lock. Compare with
// BenchmarkHandoff (the Mutex) for what FIFO order costs: every unlock
// wakes exactly the head waiter, on its own channel, so no waiter races
// another for the lock, but each wait subscribes to a channel of its own.
func BenchmarkFairHandoff(b *testing.B) {
	for _, clients := range []int{1, 2} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchHandoff(b, clients, 16, func(tb testing.TB, c *Client, name string) Locker {
				return mustFair(tb, c, name)
			})
		})
	}
}
