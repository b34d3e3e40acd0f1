package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/clock"
)

// TestPermitClockJump pins the clock seam (internal/clock) and what it
// lets the verify/ harness show: the PermitSemaphore keeps permit
// expiries on its clients' wall clocks, as Redisson does, so a client
// whose clock jumps ahead by more than a permit's lease reclaims the
// other clients' live permits and takes one more than there are.
func TestPermitClockJump(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	name := lockName(t)
	a, err := newClient(t, nil).NewPermitSemaphore(name, WithPermitLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newClient(t, nil).NewPermitSemaphore(name, WithPermitLease(time.Minute))
	if _, err := a.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Delete(context.Background()) })
	pa, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("the second permit of one, on a true clock: %v, want ErrNotObtained", err)
	}
	clock.Jump(2 * time.Minute) // the clock of this process, hence of b
	defer clock.Jump(-2 * time.Minute)
	pb, err := b.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the second permit of one, 2 minutes ahead: %v; want it taken (a's reclaimed)", err)
	}
	b.Release(pb)
	a.Release(pa)
}
