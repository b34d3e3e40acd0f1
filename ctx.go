package dlock

import (
	"context"
	"time"
)

// What every step that waits asks of a context.

// ctxErr is ctx.Err(), counting a deadline that has passed as exceeded
// even before ctx's timer has fired: a Redis client whose socket deadline
// is ctx's deadline can fail a moment before ctx.Err() says so.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// ctxDone reports whether ctx is over, by ctxErr.
func ctxDone(ctx context.Context) bool { return ctxErr(ctx) != nil }

// hasDeadline reports whether ctx has a deadline.
func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}
