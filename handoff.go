package dlock

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// Handing a lock over inside one Client. When a Client releases a lock
// that one of its own goroutines waits for, the release script gives the
// lock straight to that waiter: one round trip where a plain release costs
// the waiter a publish, a wake-up and a new attempt, and the lock is never
// free in between for other processes' waiters to race for. So that they
// are not starved, a Client hands a lock over at most handoffBound times in
// a row while other processes wait for it; the next release frees it and
// publishes, as sync.Mutex's starvation mode gives a waiting goroutine its
// turn.

// handoffBound is how many times in a row a Client hands a lock to its own
// waiters while another process waits for it too.
const handoffBound = 4

// handoffer is implemented by kinds whose release can hand the lock over.
type handoffer interface {
	// releaseTo releases r.owner's hold and hands the lock to next.owner
	// as when allows (see lock_release_to.lua); ours is how many of the
	// channel's subscriptions are this Client's.
	releaseTo(ctx context.Context, r, next request, when string, ours int) (handoff, error)
}

// queue is one lock's waiters in this Client that a release can hand the
// lock to, in the order they started waiting. Guarded by the Client's
// mutex.
type queue struct {
	places   []*place
	handoffs int // hand-overs in a row
}

// place is a waiting Lock's place in its lock's queue. While the Lock
// sleeps the place is queued; a release that picks it marks it chosen and
// sends the outcome on grant.
type place struct {
	req        request
	ticket     uint64 // the queue's order
	queued     bool
	chosen     bool
	subscribed bool // its Lock's subscription was confirmed before
	grant      chan grant
}

// grant is the outcome of a hand-over to a place: ok when the lock is the
// waiter's now, with its token and the time the hand-over was sent (its
// lease counts from then); freed when the release freed the lock and
// published instead, so that another process's waiter gets its turn;
// unknown when the release got no answer (the lock may be the waiter's).
type grant struct {
	ok, freed, unknown bool
	token              int64
	start              time.Time
}

// handoff is what a releaseTo did.
type handoff struct {
	res           releaseResult
	handed, freed bool  // handed to the waiter; freed and published instead
	token         int64 // the waiter's fencing token, when handed
}

// queueKey names the queue of h's lock.
func (h *handle) queueKey() lockKey { return lockKey{h.kind.key(), h.kind.role()} }

// handsOver reports whether a Lock by req on h can be handed the lock.
func (h *handle) handsOver(req request) bool {
	_, ok := h.kind.(handoffer)
	return ok && req.wait
}

// newPlace returns a place for a Lock by req on h.
func (h *handle) newPlace(req request) *place {
	return &place{req: req, ticket: h.c.tickets.Add(1), grant: make(chan grant, 1)}
}

// How a Client is busy with a lock already (busyHere).
const (
	notHere    = iota
	heldHere   // another owner of the Client holds it
	waitedHere // Locks of the Client wait for it, subscribed
)

// busyHere tells whether this Client is busy with h's lock already, for a
// Lock by owner, and how long that Lock should sleep at most: the local
// holder's lease, or pollNoExpiry behind subscribed waiters.
func (c *Client) busyHere(h *handle, owner string) (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hd := c.holders[h.queueKey()]; hd != nil && hd.owner != owner {
		return time.Until(hd.until), heldHere
	}
	if q := c.queues[h.queueKey()]; q != nil && slices.ContainsFunc(q.places, func(p *place) bool { return p.subscribed }) {
		return pollNoExpiry, waitedHere
	}
	return 0, notHere
}

// enqueue puts p into h's queue for the time its Lock sleeps.
func (c *Client) enqueue(h *handle, p *place) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[h.queueKey()]
	if q == nil {
		q = &queue{}
		c.queues[h.queueKey()] = q
	}
	i, _ := slices.BinarySearchFunc(q.places, p.ticket, func(a *place, t uint64) int { return cmp.Compare(a.ticket, t) })
	q.places = slices.Insert(q.places, i, p)
	p.queued = true
}

// dequeue takes p out of h's queue when its Lock wakes. It reports whether
// a release chose p and has not told its outcome yet: it then comes on
// p.grant. (An outcome already told is waiting there.)
func (c *Client) dequeue(h *handle, p *place) (pending bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.queued {
		c.unqueue(h.queueKey(), p)
	}
	return p.chosen
}

// unqueue removes p from the queue at key. c.mu must be held.
func (c *Client) unqueue(key lockKey, p *place) {
	q := c.queues[key]
	q.places = slices.DeleteFunc(q.places, func(a *place) bool { return a == p })
	p.queued = false
	if len(q.places) == 0 && q.handoffs == 0 {
		delete(c.queues, key)
	}
}

// nextWaiter picks the first waiter of h's queue for a hand-over and says
// when the script may hand the lock to it: always within the bound, and
// after that only if no other process waits. It returns nil when nobody
// in this Client waits.
func (c *Client) nextWaiter(h *handle) (*place, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[h.queueKey()]
	if q == nil || len(q.places) == 0 {
		if q != nil {
			delete(c.queues, h.queueKey())
		}
		return nil, ""
	}
	p := q.places[0]
	c.unqueue(h.queueKey(), p)
	p.chosen = true
	switch {
	case q.handoffs < handoffBound:
		return p, "always"
	case !c.cluster:
		return p, "numsub"
	case c.publish == "spublish":
		return p, "shardnumsub"
	}
	return p, "never" // classic pub/sub on a cluster: subscribers on other nodes are not counted
}

// handedOver records the outcome of a hand-over to p and tells its Lock.
// The grant goes out with c.mu held, together with chosen: a Lock that
// wakes in between must find one or the other (dequeue).
func (c *Client) handedOver(h *handle, p *place, g grant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.chosen = false
	p.grant <- g // buffered, and sent once per choice: never blocks
	if q := c.queues[h.queueKey()]; g.ok {
		if q == nil {
			q = &queue{}
			c.queues[h.queueKey()] = q
		}
		q.handoffs++
	} else if q != nil {
		q.handoffs = 0
		if len(q.places) == 0 {
			delete(c.queues, h.queueKey())
		}
	}
}
