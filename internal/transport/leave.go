package transport

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Scripts whose caller may leave: a caller that must return when its ctx
// ends, on a Redis client that ignores ctx (go-redis's default), used to
// hand its whole attempt to another goroutine and wait for it there. On a
// loaded two-core machine that hand-over and the wake-up back cost as much
// client CPU as the attempt itself (profiled: futex wake-ups of idle
// threads, one per hand-over). Here the caller runs its attempt itself and
// only the socket I/O is done by someone else: a script that finds the
// wire full waits in the batcher's queue, as every batched script does,
// and is sent by the caller whose batch returns; only a script that would
// go out at once, or a batch this caller would send, is handed to a helper
// goroutine. The caller waits for the reply or its ctx, whichever comes
// first. A caller that leaves while its script is on the wire gets the
// script's completion (Left.Pending) to wait for before it gives back what
// the script may have taken: given back earlier, on another connection,
// the release could run before the script.

// Left is filled by Run for a ctx made by MayLeave: it says whether the
// caller left a script on the wire.
type Left struct {
	pending <-chan struct{}
}

// Pending returns nil when no script was left on the wire, else a channel
// closed once the script left there has its reply or has failed: only
// then may what it did be undone.
func (l *Left) Pending() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.pending
}

type leaveKey struct{}

// MayLeave returns ctx for a caller that must return when ctx ends though
// the Redis client ignores ctx: Run, given it, sends no script on the
// caller's goroutine and returns when ctx ends, with ctx's error and a
// command of its own, while a script it left goes on (Left.Pending). Only
// Run honours it, and only where CanLeave: a caller whose work goes
// through RunOnce, WAIT or a cluster must not use it.
func MayLeave(ctx context.Context) (context.Context, *Left) {
	l := new(Left)
	return context.WithValue(ctx, leaveKey{}, l), l
}

// leaving returns the Left of a ctx made by MayLeave, or nil.
func leaving(ctx context.Context) *Left {
	l, _ := ctx.Value(leaveKey{}).(*Left)
	return l
}

// LeftOf returns the Left of a ctx made by MayLeave, or nil.
func LeftOf(ctx context.Context) *Left { return leaving(ctx) }

// CanLeave reports whether Run can send for a caller that may leave
// (MayLeave): every Run goes through the batcher (not on a cluster) and
// no write waits for replicas (WAIT runs on the caller's goroutine).
func (t *Transport) CanLeave() bool { return !t.batch.off && !t.replicas.enabled() }

// processLeaving runs cmd for a caller that may leave: the caller sends
// nothing itself. It returns nil when cmd has its reply or error, or, when
// ctx ends first, with cmd unsent and ctx's error in it, or else the
// channel closed when cmd, still on the wire, completes; cmd is then not
// the caller's to read.
//
// With room on the wire, the uncontended case, cmd goes out at once on a
// helper goroutine (handOver): such a caller still pays the hand-over and
// wake-up the note at the top of this file describes, once per script.
// Only a script that queues behind a full wire is spared it (sent with a
// batch, by the caller whose batch returns).
func (b *batcher) processLeaving(ctx context.Context, cmd *redis.Cmd) (pending <-chan struct{}) {
	b.mu.Lock()
	if b.onWire < maxOnWire {
		b.onWire++
		b.mu.Unlock()
		return b.handOver(ctx, func() { _ = b.rdb.Process(context.WithoutCancel(ctx), cmd) })
	}
	q := &queued{ctx: ctx, cmd: cmd, done: make(chan struct{}), leaving: true}
	b.queue = append(b.queue, q)
	b.mu.Unlock()

	select {
	case <-q.done:
	case <-ctx.Done():
		if b.withdraw(q) {
			cmd.SetErr(ctx.Err())
			return nil
		}
		select {
		case <-q.done: // made the sender, or the reply is in
		default:
			return q.done // in a batch another caller sends
		}
	}
	if q.batch == nil {
		return nil
	}
	batch := q.batch
	return b.handOver(ctx, func() { b.send(batch) })
}

// handOver runs send, the sending of a script or batch taken onto the
// wire, on a helper goroutine, then takes it off (passOn), and waits for
// it or for ctx. A panic in send (a go-redis hook) reaches the caller, as
// it would have had the caller sent; once the caller has left, it goes
// on on the helper.
func (b *batcher) handOver(ctx context.Context, send func()) <-chan struct{} {
	h := &handing{b: b, send: send, replied: make(chan struct{})}
	b.helpers.Run(h.run)
	select {
	case <-h.replied:
	case <-ctx.Done():
		h.mu.Lock()
		select {
		case <-h.replied:
		default:
			h.left = true
		}
		h.mu.Unlock()
		if h.left {
			return h.replied
		}
	}
	if h.panicked != nil {
		panic(h.panicked)
	}
	return nil
}

// handing is one handOver: its state in one allocation, where a closure
// would make one per captured variable.
type handing struct {
	b        *batcher
	send     func()
	replied  chan struct{} // closed once send has returned or panicked
	mu       sync.Mutex    // orders the caller's leaving and the helper's end
	left     bool
	panicked any
}

// run is the helper's part of handOver.
func (h *handing) run() {
	defer h.b.passOn()
	defer func() {
		p := recover()
		h.mu.Lock()
		h.panicked = p
		gone := h.left
		close(h.replied)
		h.mu.Unlock()
		if p != nil && gone {
			panic(p)
		}
	}()
	h.send()
}

// maxIdleHelpers bounds the goroutines kept idle for the sends of
// callers that may leave (batcher.helpers).
const maxIdleHelpers = maxOnWire * 2
