package dlock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// inflight orders a RedLock's requests per owner and node. An attempt
// returns as soon as a quorum has answered, so the other nodes' acquire
// requests may still be on their way when the owner releases; a release
// sent on another connection could then reach a node before the acquire
// it should undo, and leave a grant behind until its lease runs out. So a
// release on a node first waits for the owner's acquire requests already
// sent to that node.
type inflight struct {
	mu sync.Mutex
	m  map[inflightKey][]*sentAttempt
}

type inflightKey struct {
	owner string
	node  int
}

// sentAttempt is one acquire request sent to one node.
type sentAttempt struct {
	done    chan struct{} // closed when the node answered or the request failed
	granted bool          // set before done is closed
}

// begin records an acquire request of owner about to be sent to node.
func (f *inflight) begin(owner string, node int) *sentAttempt {
	a := &sentAttempt{done: make(chan struct{})}
	k := inflightKey{owner, node}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[inflightKey][]*sentAttempt{}
	}
	f.m[k] = append(f.m[k], a)
	return a
}

// finish records the outcome of a request begin recorded.
func (f *inflight) finish(owner string, node int, a *sentAttempt, granted bool) {
	k := inflightKey{owner, node}
	f.mu.Lock()
	f.m[k] = slices.DeleteFunc(f.m[k], func(b *sentAttempt) bool { return b == a })
	if len(f.m[k]) == 0 {
		delete(f.m, k)
	}
	f.mu.Unlock()
	a.granted = granted
	close(a.done)
}

// after waits until every acquire request of owner sent to node so far has
// finished, and returns the context to send the next request with: ctx
// itself when nothing was pending, else a new one with timeout from now,
// since ctx may have run out while waiting. A caller that stops waiting
// for the result (fanOut's timeout) leaves the request to be sent late
// rather than out of order.
func (f *inflight) after(ctx context.Context, owner string, node int, timeout time.Duration) (context.Context, context.CancelFunc) {
	f.mu.Lock()
	pending := slices.Clone(f.m[inflightKey{owner, node}])
	f.mu.Unlock()
	if len(pending) == 0 {
		return ctx, func() {}
	}
	for _, a := range pending {
		<-a.done
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}
