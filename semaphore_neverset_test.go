package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSemaphoreAcquireNeverSetUp: Acquire on a semaphore that was never
// set up waits for ctx like any other, and its error then says that the
// semaphore does not exist; a semaphore set up with no permits left gets
// the plain error.
func TestSemaphoreAcquireNeverSetUp(t *testing.T) {
	name := lockName(t)
	s := mustSemaphore(t, newClient(t, nil), name)
	acquire := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		return s.Acquire(ctx, 1)
	}
	err := acquire()
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "never set up") {
		t.Errorf("Acquire on a semaphore never set up: %v; want ErrNotObtained, DeadlineExceeded, and \"never set up\"", err)
	}
	if ok, err := s.TrySetPermits(t.Context(), 0); !ok || err != nil {
		t.Fatalf("TrySetPermits(0) = %v, %v", ok, err)
	}
	err = acquire()
	if !errors.Is(err, ErrNotObtained) || strings.Contains(err.Error(), "never set up") {
		t.Errorf("Acquire on a semaphore set up with 0 permits: %v; want ErrNotObtained without \"never set up\"", err)
	}
}
