package dlock

import (
	"context"
	"testing"
	"time"
)

// TestLocalDeadlineBeforeExpiry checks that a hold's local deadline, when
// its lock context is cancelled, comes before the lease can run out in
// Redis, for every kind on one server and for a watchdog lease as for a
// fixed one: the lease starts in Redis after the request was sent, so a
// deadline of sent+lease would be met only if the timer fired on time, and
// under load it fires late, after the next owner was granted the lock.
func TestLocalDeadlineBeforeExpiry(t *testing.T) {
	ctx := boundedCtx(t, 10*time.Second)
	c := newClient(t, nil)
	const lease = 4 * time.Second
	name := lockName(t)
	m, err := c.NewMutex(name+"-m", WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.NewFairMutex(name+"-f", WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.NewRWMutex(name + "-rw")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		h     *handle
		lease time.Duration
	}{
		{"Mutex fixed lease", &m.handle, lease},
		{"FairMutex fixed lease", &f.handle, lease},
		{"ReadLock watchdog", &rw.ReadLock().handle, c.cfg.watchdogTimeout},
	} {
		sent := time.Now()
		l, err := tc.h.Lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		owner, _ := ownerFrom(l, c)
		hd := c.holds.held(tc.h.holdKey(owner))
		if hd == nil {
			t.Fatalf("%s: no hold registered", tc.name)
		}
		// Redis started the lease after sent: the lease cannot run out
		// there before sent+lease, and the hold must end locally before.
		if d := c.holds.deadline(hd); !d.Before(sent.Add(tc.lease)) {
			t.Errorf("%s: local deadline %v after the request was sent, not before the lease (%v) can run out in Redis",
				tc.name, d.Sub(sent), tc.lease)
		}
		if err := tc.h.Unlock(context.WithoutCancel(l)); err != nil {
			t.Fatalf("%s: unlock: %v", tc.name, err)
		}
	}
}
