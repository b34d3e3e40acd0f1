package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the lock scripts that goroutines of one Client issue at the
// same time together, as one pipeline: while one batch is on the wire, the
// scripts that arrive wait, and the first of them sends them all when the
// batch returns. A script that finds no batch on the wire goes out at once
// as a plain command, so a lone goroutine pays one uncontended mutex and
// nothing else; sixteen goroutines share one write and one read per round
// trip instead of paying one each, on the client and in Redis.
//
// Every caller has one command outstanding and waits for its reply, so
// batching changes no order a caller can observe. go-redis re-sends a
// pipeline's commands after a lost reply as it re-sends a lone command, so
// the send counting of eval.go holds for batched scripts too.
type batcher struct {
	rdb redis.UniversalClient

	mu    sync.Mutex
	busy  bool      // a batch is on the wire, or its sender is choosing the next
	queue []*queued // scripts waiting for the batch on the wire to return
}

// queued is a script waiting its turn: the sender of its batch closes done
// once the reply is in, or sets lead and closes done to make this caller
// the sender of the next batch.
type queued struct {
	ctx  context.Context
	cmd  *redis.Cmd
	lead bool
	done chan struct{}
}

// process runs cmd, alone at once if no batch is on the wire, else in the
// next batch. It returns once cmd has its reply or error.
func (b *batcher) process(ctx context.Context, cmd *redis.Cmd) {
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		_ = b.rdb.Process(ctx, cmd)
		b.passOn()
		return
	}
	q := &queued{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()

	<-q.done // the sender of a batch in flight always closes it
	if q.lead {
		b.send()
		b.passOn()
	}
}

// send takes every waiting script, the caller's own first, and runs them
// as one pipeline.
func (b *batcher) send() {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	b.mu.Unlock()

	pipe := b.rdb.Pipeline()
	for _, q := range batch {
		if err := q.ctx.Err(); err != nil {
			q.cmd.SetErr(err) // its caller gave up before it was sent
			continue
		}
		_ = pipe.Process(q.ctx, q.cmd)
	}
	if pipe.Len() > 0 {
		ctx, cancel := batchContext(batch)
		_, _ = pipe.Exec(ctx)
		cancel()
	}
	for _, q := range batch[1:] {
		close(q.done)
	}
}

// passOn makes the first waiting caller the sender of the next batch, or
// marks the batcher idle when no one waits.
func (b *batcher) passOn() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy = false
		return
	}
	next := b.queue[0]
	next.lead = true
	close(next.done)
}

// batchContext is the context a batch runs under: the first caller's
// values, no cancellation, and the latest deadline of the batch, so that
// no caller's command is cut short by another caller's earlier deadline
// (go-redis applies deadlines only with ContextTimeoutEnabled). A caller
// without deadline leaves the batch to the Redis client's timeouts.
func batchContext(batch []*queued) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
