package dlock

import (
	"context"
	"errors"
	"testing"
)

// TestReentryAfterLoss: A holds a fenced lock; the lock is deleted
// (ForceUnlock); B takes and releases it; A re-enters with its lock
// context before the watchdog notices. The re-entry must not succeed
// silently: B held the lock during A's outer critical section.
func TestReentryAfterLoss(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	a := mustMutex(t, newClient(t, nil), name, WithFencing())
	b := mustMutex(t, newClient(t, nil), name, WithFencing())
	la := mustLock(t, ctx, a)
	ta, _ := Token(la)
	if ok, err := b.ForceUnlock(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	lb := mustLock(t, ctx, b)
	tb, _ := Token(lb)
	if err := b.Unlock(lb); err != nil {
		t.Fatal(err)
	}
	la2, err := a.Lock(la)
	if err == nil {
		t2, _ := Token(la2)
		t.Errorf("re-entry after the hold was lost succeeded: outer token %d, B's token %d, re-entry token %d; outer lock context alive: %v",
			ta, tb, t2, la.Err() == nil)
	}
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrLockLost) {
		t.Errorf("re-entry after loss: %v, want ErrNotObtained and ErrLockLost", err)
	}
	if !errors.Is(context.Cause(la), ErrLockLost) {
		t.Errorf("outer lock context: cause %v, want ErrLockLost", context.Cause(la))
	}
}

func TestReentryAfterLossKinds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		kind string
		mk   func(c *Client, name string) Locker
	}{
		{"fair", func(c *Client, name string) Locker { m, _ := c.NewFairMutex(name, WithFencing()); return m }},
		{"write", func(c *Client, name string) Locker { m, _ := c.NewRWMutex(name, WithFencing()); return m.WriteLock() }},
		{"read-vs-writer", nil},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			name := lockName(t)
			ca, cb := newClient(t, nil), newClient(t, nil)
			var a, b Locker
			if tc.mk != nil {
				a, b = tc.mk(ca, name), tc.mk(cb, name)
			} else {
				ra, _ := ca.NewRWMutex(name)
				rb, _ := cb.NewRWMutex(name)
				a, b = ra.ReadLock(), rb.WriteLock()
			}
			la, err := a.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ca.rdb.Del(ctx, name).Err(); err != nil {
				t.Fatal(err)
			}
			lb, err := b.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Unlock(lb); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Lock(la); err == nil {
				t.Errorf("re-entry after another owner held the lock succeeded; outer lock context alive: %v", la.Err() == nil)
			}
		})
	}
}
