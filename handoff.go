package dlock

import (
	"cmp"
	"context"
	"slices"
	"sync"
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

// handoffQueues are the queues of a Client's locks: per lock, its waiters
// in this Client that a release can hand it to. Its mutex guards the
// queues and the fields of their places that say so; it calls nothing
// under it. The zero value has no queues; past must be set before use.
type handoffQueues struct {
	// past says when a release may hand a lock over once it has been
	// handed handoffBound times in a row (pastBound).
	past string

	mu sync.Mutex
	m  map[lockKey]*queue
}

// queue is one lock's waiters in this Client that a release can hand the
// lock to, in the order they started waiting. Guarded by the queues'
// mutex.
type queue struct {
	places   []*place
	handoffs int // hand-overs in a row
}

// place is a waiting Lock's place in its lock's queue. While the Lock
// sleeps the place is queued; a release that picks it marks it chosen and
// sends the outcome on grant. queued, chosen and subscribed are guarded by
// the queues' mutex.
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
	heldSilent // another owner of the Client holds it, and its release publishes nothing
)

// busyHere tells whether this Client is busy with h's lock already, for a
// Lock by owner, and how long that Lock should sleep at most: the local
// holder's lease, or pollNoExpiry behind subscribed waiters. It reads the
// registry and then the queues, each under its own lock: the answer may
// mix two moments, which costs nothing, since each answer only chooses
// the first sleep. A holder found is there at the first moment; waiters
// found are queued and subscribed at the second, ahead of this Lock, and a
// release reaches it through them whether or not a holder came meanwhile.
// A holder of a kind whose release publishes nothing (a SpinLock's, on a
// Mutex's name) is heldSilent: a Lock that slept behind it would wait for
// a message or a hand-over that never comes, so it asks Redis instead.
func (h *handle) busyHere(owner string) (time.Duration, int) {
	if h.c.holds.held(h.holdKey(owner)) != nil {
		return 0, notHere // a re-entry: only Redis can confirm the hold
	}
	if d, silent, ok := h.c.holds.heldByOther(h.queueKey(), owner); ok {
		if silent {
			return 0, heldSilent
		}
		return d, heldHere
	}
	if h.c.queues.waited(h.queueKey()) {
		return pollNoExpiry, waitedHere
	}
	return 0, notHere
}

// waited reports whether Locks of this Client wait for lock qk, subscribed.
func (qs *handoffQueues) waited(qk lockKey) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.m[qk]
	return q != nil && slices.ContainsFunc(q.places, func(p *place) bool { return p.subscribed })
}

// enqueue puts p into lock qk's queue for the time its Lock sleeps.
func (qs *handoffQueues) enqueue(qk lockKey, p *place) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.queue(qk)
	i, _ := slices.BinarySearchFunc(q.places, p.ticket, func(a *place, t uint64) int { return cmp.Compare(a.ticket, t) })
	q.places = slices.Insert(q.places, i, p)
	p.queued = true
}

// queue returns lock qk's queue, made if need be. qs.mu must be held.
func (qs *handoffQueues) queue(qk lockKey) *queue {
	q := qs.m[qk]
	if q == nil {
		if qs.m == nil {
			qs.m = map[lockKey]*queue{}
		}
		q = &queue{}
		qs.m[qk] = q
	}
	return q
}

// subscribed marks p's Lock as subscribed: its subscription was confirmed.
func (qs *handoffQueues) subscribed(p *place) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	p.subscribed = true
}

// dequeue takes p out of lock qk's queue when its Lock wakes. It reports
// whether a release chose p and has not told its outcome yet: it then
// comes on p.grant. (An outcome already told is waiting there.)
func (qs *handoffQueues) dequeue(qk lockKey, p *place) (pending bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if p.queued {
		qs.unqueue(qk, p)
	}
	return p.chosen
}

// unqueue removes p from the queue at key. qs.mu must be held.
func (qs *handoffQueues) unqueue(key lockKey, p *place) {
	q := qs.m[key]
	q.places = slices.DeleteFunc(q.places, func(a *place) bool { return a == p })
	p.queued = false
	if len(q.places) == 0 && q.handoffs == 0 {
		delete(qs.m, key)
	}
}

// next picks the first waiter of lock qk's queue for a hand-over and says
// when the script may hand the lock to it: always within the bound, and
// after that only if no other process waits (past). It returns nil when
// nobody in this Client waits.
func (qs *handoffQueues) next(qk lockKey) (*place, string) {
	return qs.nextWithin(qk, handoffBound)
}

// nextWithin is next with bound hand-overs in a row before past applies.
func (qs *handoffQueues) nextWithin(qk lockKey, bound int) (*place, string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.m[qk]
	if q == nil || len(q.places) == 0 {
		if q != nil {
			delete(qs.m, qk)
		}
		return nil, ""
	}
	p := q.places[0]
	qs.unqueue(qk, p)
	p.chosen = true
	if q.handoffs < bound {
		return p, "always"
	}
	return p, qs.past
}

// wakeFirst wakes the first waiter of lock qk's queue to try again at
// once, if this Client has one: the lock was freed by a release that
// hands nothing over and publishes nothing (a SpinLock's), so neither a
// hand-over nor a message would reach the waiters of other kinds that
// sleep on the same name.
func (qs *handoffQueues) wakeFirst(qk lockKey) {
	if p, _ := qs.next(qk); p != nil {
		qs.handedOver(qk, p, grant{}) // neither handed nor freed: try again
	}
}

// pastBound is when a release may hand a lock over past handoffBound: if
// PUBSUB NUMSUB (SHARDNUMSUB with sharded pub/sub on a cluster) counts no
// other subscriber; never with classic pub/sub on a cluster, whose
// subscribers on other nodes are not counted.
func pastBound(cluster bool, publish string) string {
	switch {
	case !cluster:
		return "numsub"
	case publish == "spublish":
		return "shardnumsub"
	}
	return "never"
}

// handedOver records the outcome of a hand-over to p and tells its Lock.
// The grant goes out with qs.mu held, together with chosen: a Lock that
// wakes in between must find one or the other (dequeue).
func (qs *handoffQueues) handedOver(qk lockKey, p *place, g grant) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	p.chosen = false
	p.grant <- g // buffered, and sent once per choice: never blocks
	if q := qs.m[qk]; g.ok {
		qs.queue(qk).handoffs++
	} else if q != nil {
		q.handoffs = 0
		if len(q.places) == 0 {
			delete(qs.m, qk)
		}
	}
}
