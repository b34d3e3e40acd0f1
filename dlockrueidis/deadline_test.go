package dlockrueidis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

// TestLockEndsByDeadline: on a server that answers late, a Lock whose ctx
// has a deadline returns by it: rueidis ends the request at ctx's end.
func TestLockEndsByDeadline(t *testing.T) {
	p := redistest.NewTestProxy(t, redisAddr)
	c := newClientOn(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}})
	m := must(c.NewMutex(testName(t)))
	p.SetLatency(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Lock(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock on a slow server = %v, want an error wrapping DeadlineExceeded", err)
	}
	if took > 2*time.Second {
		t.Errorf("Lock returned after %v; its deadline was 200ms (the server answers after 3s)", took)
	}
	p.SetLatency(0)
}
