package dlock

import (
	"context"
	"testing"
)

// TestOwnerIsTheHashField checks that Owner names the field the lock's
// hash counts the holds under, and nothing for a context without a lock.
func TestOwnerIsTheHashField(t *testing.T) {
	c := newClient(t, nil)
	name := lockName(t)
	m := mustMutex(t, c, name)
	lockCtx := mustLock(t, t.Context(), m)
	defer m.Unlock(lockCtx)

	owner, ok := c.Owner(lockCtx)
	if !ok {
		t.Fatal("Owner(lock context): not ok")
	}
	n, err := newRedis(t).HGet(t.Context(), name, owner).Int()
	if err != nil || n != 1 {
		t.Fatalf("HGET %s %s = %d, %v; want 1", name, owner, n, err)
	}
	if o, ok := c.Owner(context.Background()); ok {
		t.Errorf("Owner(background) = %q, true; want false", o)
	}
	other := newClient(t, nil)
	if o, ok := other.Owner(lockCtx); ok {
		t.Errorf("another Client's Owner(lock context) = %q, true; want false", o)
	}
}
