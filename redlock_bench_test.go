package dlock

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkRedLockLockUnlock is the uncontended cost of one RedLock Lock
// plus Unlock on 3 and 5 local servers, without and with fencing (which
// adds a second round to every acquisition). Compare with redsync's
// Lock+Unlock on the same servers in the bench/ module.
func BenchmarkRedLockLockUnlock(b *testing.B) {
	for _, n := range []int{3, 5} {
		for _, fenced := range []bool{false, true} {
			b.Run(fmt.Sprintf("nodes=%d/fenced=%v", n, fenced), func(b *testing.B) {
				ctx := context.Background()
				_, clients := redLockNodes(b, n)
				var opts []LockOption
				if fenced {
					opts = append(opts, WithFencing())
				}
				l := mustRedLock(b, clients, "bench:redlock", opts...)
				for b.Loop() {
					lockCtx, err := l.Lock(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Unlock(lockCtx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkMultiLockLockUnlock is the cost of one MultiLock Lock plus
// Unlock over 3 Mutexes on one server (members are locked one after the
// other: 3 round trips to lock, 3 to unlock).
func BenchmarkMultiLockLockUnlock(b *testing.B) {
	ctx := context.Background()
	c := newClient(b, nil)
	x, y, z := threeMutexes(b, c, lockName(b))
	m := mustMultiLock(b, x, y, z)
	for b.Loop() {
		lockCtx, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(lockCtx); err != nil {
			b.Fatal(err)
		}
	}
}
