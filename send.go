package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Sending an attempt: on the caller's goroutine when the attempt cannot
// outlast the caller's ctx, else on a goroutine of a small pool, so that
// Lock returns by its deadline whatever Redis does; and the checks around
// the kind's script that every attempt needs: the reach gate, the replica
// sync, and giving back what an attempt that failed may have taken.

// sendsInline reports whether an attempt with ctx runs on the caller's
// goroutine: when ctx cannot end, or when it has a deadline and the
// Client's Redis client ends every request by its ctx's deadline
// (honoursDeadlines: go-redis's ContextTimeoutEnabled; the batcher then
// sends such scripts alone, never behind another's batch). A ctx
// cancelled before its deadline is then noticed when the attempt's round
// trip is over, which on a frozen server is the deadline. Handing an
// attempt to another goroutine and back costs more than the attempt's own
// work in the client, so it is done only where it must be.
func (h *handle) sendsInline(ctx context.Context) bool {
	return ctx.Done() == nil || h.c.deadlines && hasDeadline(ctx)
}

// reply is the outcome of one attempt.
type reply struct {
	res attemptResult
	err error
}

// sendAside sends an attempt on a goroutine of the Client's pool (a
// cluster client, a ctx with no deadline that can be cancelled) and
// returns when it has its reply or when ctx ends, if that comes first,
// even on a Redis client that ignores ctx: the attempt goes on in the
// background (left is true), what it took is given back there, and done
// is called when it has finished.
func (h *handle) sendAside(ctx context.Context, req request, done func()) (res attemptResult, left bool, err error) {
	if h.mayLeave() {
		return h.sendLeaving(ctx, req, done)
	}
	replied := make(chan reply, 1)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), asideTimeout)
	h.c.runners.Run(func() {
		defer cancel()
		res, err := h.send(actx, req)
		if actx.Err() != nil && isTimeout(err) {
			err = fmt.Errorf("%w: %w", errAsideTimeout, err)
		}
		replied <- reply{res, err}
	})
	select {
	case r := <-replied:
		// An attempt whose own bound ran out (errAsideTimeout) failed
		// without an answer: send gave back what it may have taken, and
		// the acquire loop tries again while the Lock's patience with
		// such failures lasts (waiter.outlast), as after any other.
		return r.res, false, r.err
	case <-ctx.Done():
		h.c.work.run(h.holdKey(req.owner), func(context.Context) {
			defer done()
			if r := <-replied; r.err == nil && r.res.acquired {
				grace(h.giveBack(req))
			}
			h.leave(req) // the attempt may have queued the owner after gaveUp took it out
		})
		return attemptResult{}, true, ctxErr(ctx)
	}
}

// asideTimeout bounds an attempt handed aside (sendAside), whose ctx may
// have no deadline: cleanupTimeout, a variable for tests.
var asideTimeout = cleanupTimeout

// errAsideTimeout marks an attempt handed aside that ran out of
// asideTimeout while its caller's ctx had not ended. The caller never set
// that deadline: a Lock that waits tries again after retryPause for up to
// asidePatience of such failures in a row, with a warning each time, then
// returns the error (waiter.outlast); a TryLock reports it at once.
var errAsideTimeout = errors.New("the attempt got no answer within its bound")

// asidePatience is how long a waiting Lock goes on trying while its
// attempts handed aside run out of asideTimeout (errAsideTimeout): a kind
// with a patience of its own (patient) keeps the longer of the two.
// outageBudget; a variable for tests.
var asidePatience = outageBudget

// isTimeout reports whether err is a request's timeout: its ctx's deadline
// or a network timeout. Other errors (a refusal, a broken connection)
// are not the aside bound's doing and are returned as they are.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// mayLeave reports whether an attempt that must return when its ctx ends
// can run on the caller's goroutine, its script sent by the batcher
// (transport.MayLeave): the kind's attempt is one Run, where the transport
// can leave a script on the wire (oneRun), and none of its sends waits for
// replicas or goes to a cluster (Transport.CanLeave). Handing the attempt
// to another goroutine costs more than the attempt's own work in the
// client.
func (h *handle) mayLeave() bool {
	_, one := h.kind.(oneRun)
	return one && h.c.drv.CanLeave()
}

// sendLeaving makes an attempt on the caller's goroutine that returns when
// ctx ends, even on a Redis client that ignores ctx: the transport sends
// its script and the caller waits for the reply or ctx. An attempt whose
// script was left on the wire (left is true) is finished in the
// background: once the script has its reply or has failed, what it may
// have taken is given back, the owner leaves the queue it may have joined
// after gaveUp took it out, and done is called.
func (h *handle) sendLeaving(ctx context.Context, req request, done func()) (res attemptResult, left bool, err error) {
	lctx, l := transport.MayLeave(ctx)
	res, err = h.send(lctx, req)
	pending := l.Pending()
	if pending == nil {
		return res, false, err
	}
	h.c.work.run(h.holdKey(req.owner), func(context.Context) {
		defer done()
		<-pending
		grace(h.giveBack(req))
		h.leave(req)
	})
	return attemptResult{}, true, ctxErr(ctx)
}

// send makes one attempt: the kind's script behind the reach gate. A hold it took that did not reach
// enough replicas (WithReplicaSync) is given back, and the error wraps
// ErrNotReplicated. An attempt that failed without an answer may have run
// all the same: what it may have taken is given back too.
func (h *handle) send(ctx context.Context, req request) (attemptResult, error) {
	if h.c.cfg.replicas.enabled() {
		req.check = new(transport.Check)
	}
	gate := reachGate(h.c, h.kind)
	res, err := attemptResult{}, gate.Err() // Redis unreachable: do not dial
	sent := err == nil
	if sent {
		res, err = h.kind.attempt(ctx, req)
		err = gate.Saw(err) // a failed dial is ErrUnreachable from the first call on
	}
	if err != nil {
		// An attempt not sent took nothing, but a hand-over to a
		// queued Lock whose answer was lost may have made the owner
		// the holder: that is given back too.
		// A script left on the wire is given back once it completes
		// (sendLeaving): given back now, the release could run first.
		if (sent || req.queued) && !leftOnWire(ctx) {
			done := h.giveBack(req)
			if ctx.Err() == nil { // a caller out of time does not wait for it
				grace(done)
			}
		}
		return res, err
	}
	if short := req.check.Failed(); res.acquired && short != nil {
		grace(h.giveBack(req))
		return attemptResult{}, short
	}
	return res, nil
}

// leftOnWire reports whether an attempt with ctx left its script on the
// wire (sendLeaving).
func leftOnWire(ctx context.Context) bool {
	l := transport.LeftOf(ctx)
	return l != nil && l.Pending() != nil
}

// maxIdleRunners bounds the goroutines kept idle for attempts handed
// aside (Client.runners).
const maxIdleRunners = 16

// honoursDeadlines reports whether rdb ends every request by its ctx's
// deadline: a plain *redis.Client with ContextTimeoutEnabled that sets
// socket deadlines (ReadTimeout and WriteTimeout not -2). go-redis's
// default ignores ctx for socket I/O. A cluster client is not counted
// (it may reload its slot map on its own terms), nor a Sentinel failover
// client (it asks its sentinels, with their options, when it dials).
func honoursDeadlines(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return false
	}
	opt := c.Options()
	return opt.ContextTimeoutEnabled && opt.Addr != failoverAddr && opt.ReadTimeout >= 0 && opt.WriteTimeout >= 0
}
