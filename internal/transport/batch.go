package transport

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/workers"
	"github.com/redis/go-redis/v9"
)

// batcher sends the scripts that goroutines of one Client issue at the
// same time together, as one pipeline: while maxOnWire batches are on the
// wire, the scripts that arrive wait, and when a batch returns the first
// of them sends them all. A script that finds room on the wire goes out at
// once as a plain command, so a lone goroutine pays one uncontended mutex
// and nothing else; sixteen goroutines share a write and a read per round
// trip instead of paying one each, on the client and in Redis.
//
// Every caller has one command outstanding and waits for its reply, so
// batching changes no order a caller can observe. go-redis writes a
// pipeline's commands again after a lost reply or a refusal it retries,
// as it does a lone command, so the send counting of Run holds for
// batched scripts too; the whole batch is written again then, so a
// release that found nothing in such a batch reads as released, as a
// re-sent lone release does.
type batcher struct {
	rdb redis.UniversalClient
	// off sends every script alone: on a cluster a pipeline returns only
	// when every node it touches has answered, so one frozen master would
	// hold up the scripts for all the others, and go-redis may send a
	// pipelined command twice at once while a slot migrates (TRYAGAIN for
	// one command and ASK for another in the same pipeline).
	off bool
	// deadlines sends alone every script whose ctx has a deadline, when
	// the Redis client ends each request by it (ContextTimeoutEnabled):
	// a batch runs under the latest deadline of its scripts, or none, so
	// a script in it could outlast its own.
	deadlines bool

	mu     sync.Mutex
	onWire int       // batches on the wire, or whose senders choose the next
	queue  []*queued // scripts waiting for a batch on the wire to return

	helpers *workers.Pool // send for callers that may leave (leave.go)
}

// maxOnWire is how many batches of one Client may be on the wire at once:
// with one, the scripts of goroutines woken by a reply wait a whole round
// trip for the next batch; with a few, batches overlap and stay deep
// (measured with 16 goroutines: 0.4 round trips per Lock+Unlock at 2, 0.6
// at 3, and at 1 lower throughput, 0.25 round trips).
const maxOnWire = 2

// queued is a script waiting its turn: the sender of its batch closes done
// once the reply is in, or sets batch, this caller's script first, and
// closes done to make this caller the sender of that batch.
type queued struct {
	ctx   context.Context
	cmd   *redis.Cmd
	batch []*queued
	done  chan struct{}
	// leaving is a caller that may leave (leave.go): made the sender,
	// it hands the batch to a helper goroutine.
	leaving bool
}

// process runs cmd, alone at once if there is room on the wire, else in
// the next batch. It returns once cmd has its reply or error, or, when
// ctx ends before a batch took cmd, with ctx's error and cmd unsent.
func (b *batcher) process(ctx context.Context, cmd *redis.Cmd) {
	if _, deadline := ctx.Deadline(); b.off || b.deadlines && deadline {
		_ = b.rdb.Process(ctx, cmd)
		return
	}
	b.mu.Lock()
	if b.onWire < maxOnWire {
		b.onWire++
		b.mu.Unlock()
		defer b.passOn()
		_ = b.rdb.Process(ctx, cmd)
		return
	}
	q := &queued{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()

	select {
	case <-q.done:
	case <-ctx.Done():
		if b.withdraw(q) {
			cmd.SetErr(ctx.Err())
			return
		}
		<-q.done // taken into a batch: its sender closes done
	}
	if q.batch != nil {
		defer b.passOn()
		b.send(q.batch)
	}
}

// withdraw takes q out of the queue, unless a batch took it already.
func (b *batcher) withdraw(q *queued) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, o := range b.queue {
		if o == q {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// send runs the scripts of a batch, the sender's own first, as one
// pipeline.
func (b *batcher) send(batch []*queued) {
	defer func() { // even if a hook panics: no caller is left waiting
		for _, q := range batch[1:] {
			close(q.done)
		}
	}()
	pipe := b.rdb.Pipeline()
	for _, q := range batch {
		_ = pipe.Process(q.ctx, q.cmd)
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	_, _ = pipe.Exec(ctx)
}

// passOn makes the first waiting caller the sender of every waiting
// script, or takes one batch off the wire when no one waits. A caller
// that may leave is made the sender only when all may: it would hand the
// batch over to a helper goroutine.
func (b *batcher) passOn() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.onWire--
		return
	}
	if i := slices.IndexFunc(b.queue, func(q *queued) bool { return !q.leaving }); i > 0 {
		b.queue[0], b.queue[i] = b.queue[i], b.queue[0]
	}
	next := b.queue[0]
	next.batch, b.queue = b.queue, nil
	close(next.done)
}

// batchContext is the context a batch runs under: the first caller's
// values, no cancellation, and the latest deadline of the batch, so that
// no caller's command is cut short by another caller's earlier deadline
// (go-redis applies deadlines only with ContextTimeoutEnabled). A caller
// without deadline leaves the batch to the Redis client's timeouts.
func batchContext(batch []*queued) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// Test hooks: dlock's tests stand in for batches on the wire, to see what
// the batcher does with the scripts that wait.

// FillWire makes the batcher act as if as many batches as it allows were
// on the wire, until the first of them is taken off by a returning batch
// (PassOn): the others never existed, so the test takes them off at its
// end (UnfillWire).
func (t *Transport) FillWire() {
	t.batch.mu.Lock()
	defer t.batch.mu.Unlock()
	t.batch.onWire = maxOnWire
}

// UnfillWire takes off what FillWire put on the wire beyond one batch.
func (t *Transport) UnfillWire() {
	t.batch.mu.Lock()
	defer t.batch.mu.Unlock()
	t.batch.onWire -= maxOnWire - 1
}

// ClearWire counts no batch on the wire.
func (t *Transport) ClearWire() {
	t.batch.mu.Lock()
	defer t.batch.mu.Unlock()
	t.batch.onWire = 0
}

// PassOn acts as a batch on the wire that returns.
func (t *Transport) PassOn() { t.batch.passOn() }

// MaxOnWire is maxOnWire, for tests.
const MaxOnWire = maxOnWire

// Batching returns the batches counted on the wire and the scripts
// waiting.
func (t *Transport) Batching() (onWire, queued int) {
	t.batch.mu.Lock()
	defer t.batch.mu.Unlock()
	return t.batch.onWire, len(t.batch.queue)
}

// Process runs cmd through the batcher, as Run does a script.
func (t *Transport) Process(ctx context.Context, cmd *redis.Cmd) { t.batch.process(ctx, cmd) }

// LeavingQueued returns how many waiting scripts are of callers that may
// leave (MayLeave): each waits in the queue itself.
func (t *Transport) LeavingQueued() int {
	t.batch.mu.Lock()
	defer t.batch.mu.Unlock()
	n := 0
	for _, q := range t.batch.queue {
		if q.leaving {
			n++
		}
	}
	return n
}

// SendsDeadlinesAlone reports whether scripts whose ctx has a deadline go
// out alone (Config.Deadlines).
func (t *Transport) SendsDeadlinesAlone() bool { return t.batch.deadlines }
