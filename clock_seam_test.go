package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/clock"
)

// TestPermitClockJump checks that a client's wall clock has no say in a
// PermitSemaphore's expiries: a client whose clock (as dlock reads it,
// through the seam internal/clock that the verify/ harness jumps) is two
// minutes ahead neither reclaims another client's permit with a
// one-minute lease, nor sees it shorter (LeaseTime), nor writes its own
// permits with a longer lease. The scripts read the server's TIME; they
// read the client's clock before (Redisson still does, in Java), and the
// jump took a second permit of one.
func TestPermitClockJump(t *testing.T) {
	ctx := boundedCtx(t, 20*time.Second)
	name := lockName(t)
	a, err := newClient(t, nil).NewPermitSemaphore(name, WithPermitLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newClient(t, nil).NewPermitSemaphore(name, WithPermitLease(time.Minute))
	if _, err := a.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Delete(context.Background()) })
	pa, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AddPermits(ctx, -1); err != nil { // one permit in all: a's
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("the second permit of one, on a true clock: %v, want ErrNotObtained", err)
	}
	clock.Jump(2 * time.Minute) // the clock of this process, hence of b
	defer clock.Jump(-2 * time.Minute)
	if pb, err := b.TryAcquire(ctx); !errors.Is(err, ErrNotObtained) {
		b.Release(pb)
		t.Fatalf("the second permit of one, 2 minutes ahead: %v; want ErrNotObtained (a's permit has a minute left)", err)
	}
	if n, err := b.AvailablePermits(ctx); err != nil || n != 0 {
		t.Fatalf("available permits seen 2 minutes ahead: %d, %v; want 0 (a's not reclaimed)", n, err)
	}
	id, _ := a.PermitID(pa)
	if left, err := b.LeaseTime(ctx, id); err != nil || left <= 30*time.Second || left > time.Minute {
		t.Fatalf("a's lease time seen 2 minutes ahead: %v, %v; want (30s, 1m]", left, err)
	}
	if err := pa.Err(); err != nil {
		t.Fatalf("a's permit context ended: %v (%v)", err, context.Cause(pa))
	}
	if err := a.Release(pa); err != nil {
		t.Fatalf("a's release after b's clock jump: %v", err)
	}
	// b's own permit, taken 2 minutes ahead, is leased a minute from the
	// server's now, not from b's.
	pb, err := b.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(pb)
	id, _ = b.PermitID(pb)
	if left, err := a.LeaseTime(ctx, id); err != nil || left <= 30*time.Second || left > time.Minute {
		t.Fatalf("lease time of a permit taken 2 minutes ahead: %v, %v; want (30s, 1m]", left, err)
	}
}
