package dlock

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lateDoneCtx is a context whose deadline passes before its Done channel
// closes and its Err reports it: Deadline says deadline, Done and Err are
// those of the embedded context, which ends lag later. It stretches a
// window that real contexts have too: a socket or dial deadline set to
// ctx's deadline fires at the same instant as ctx's own timer, and which
// of the two the runtime serves first is a matter of scheduling (under
// CPU load the timer's cancel can come noticeably later).
type lateDoneCtx struct {
	context.Context
	deadline time.Time
}

func (c lateDoneCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// newLateDoneCtx returns a lateDoneCtx with deadline d from now whose Done
// closes lag after that, and its cancel function.
func newLateDoneCtx(d, lag time.Duration) (lateDoneCtx, context.CancelFunc) {
	deadline := time.Now().Add(d)
	inner, cancel := context.WithDeadline(context.Background(), deadline.Add(lag))
	return lateDoneCtx{Context: inner, deadline: deadline}, cancel
}

// deadlineDialer returns a Dialer for go-redis that dials as usual except
// for a ctx whose deadline is exactly at: that dial waits until the
// deadline (or ctx's Done) and then fails with the i/o timeout a dial or
// socket deadline gives, as a connection to a server that does not answer
// in time would.
func deadlineDialer(at time.Time) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d, ok := ctx.Deadline(); ok && d.Equal(at) {
			timer := time.NewTimer(time.Until(d))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// TestLockDeadlineDuringFirstSubscribe: a Lock whose ctx deadline passes
// while its first subscription is being made (the connection for it is
// dialled: the dial fails with an i/o timeout at the deadline) returns
// ErrNotObtained wrapping context.DeadlineExceeded, as a deadline in any
// other step of the wait does (Lock's doc: "When ctx ends first the error
// wraps ErrNotObtained and ctx.Err()"), and not the subscription's wrapped
// i/o timeout, even when ctx's Done has not closed yet at that moment
// (lateDoneCtx: 10 s later). A fair waiter also leaves the queue.
func TestLockDeadlineDuringFirstSubscribe(t *testing.T) {
	for _, tc := range []struct {
		kind string
		make func(c *Client, name string) Locker
	}{
		{"mutex", func(c *Client, name string) Locker { return mustMutex(t, c, name) }},
		{"fair", func(c *Client, name string) Locker { return mustFair(t, c, name) }},
		{"read", func(c *Client, name string) Locker { return mustRW(t, c, name).ReadLock() }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ctx := context.Background()
			name := lockName(t)
			noChannelsLeft(t, name)
			holder := newClient(t, nil)
			var hl Locker
			if tc.kind == "read" { // readers wait for a writer
				hl = mustRW(t, holder, name).WriteLock()
			} else {
				hl = tc.make(holder, name)
			}
			held := mustLock(t, ctx, hl)
			t.Cleanup(func() {
				if err := hl.Unlock(held); err != nil {
					t.Error(err)
				}
			})

			const lag = 10 * time.Second
			lctx, cancel := newLateDoneCtx(500*time.Millisecond, lag)
			defer cancel()
			at, _ := lctx.Deadline()
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: deadlineDialer(at)})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb)
			if err := c.Ping(ctx); err != nil { // the command connection, dialled as usual
				t.Fatal(err)
			}
			l := tc.make(c, name)
			type result struct{ err error }
			done := make(chan result, 1)
			go func() {
				lc, err := l.Lock(lctx)
				if err == nil {
					_ = l.Unlock(lc)
				}
				done <- result{err}
			}()
			// A Lock that waited for ctx's Done, not its deadline, would
			// take lag (10 s) more and fail here.
			err := recv(t, done, lag/2, "Lock whose deadline passed during its first subscription").err
			if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock with its deadline passed during the subscription: %v, want ErrNotObtained wrapping context.DeadlineExceeded", err)
			}
			if tc.kind == "fair" {
				eventually(t, 5*time.Second, func() error {
					if q := fairQueue(t, holder.rdb, name); len(q) != 0 {
						return errors.New("the waiter is still queued")
					}
					return nil
				})
			}
		})
	}
}
