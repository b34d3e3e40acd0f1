package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/transport"
)

// Waiting, for every primitive: a sleeper is the part every wait shares
// (the subscription whose messages wake it and the timer that bounds each
// sleep); a Lock's waiter adds its place in this Client's queue for the
// lock, and a synchronizer's syncWait (synchronizer.go) an extra wake-up.
// Both are contenders of the one acquire loop (acquire.go). Between
// attempts a Lock's waiter (a lock's, or a permit's) sleeps until an
// unlock message, the end of the current hold's lease, a hand-over from a
// release of this Client, or the end of its ctx.

// pollNoExpiry is how often a waiter retries a lock whose key has no TTL
// (not one dlock or Redisson wrote) when no unlock message comes.
const pollNoExpiry = time.Second

// sleeper is what every wait sleeps with: the subscription to the
// channel whose messages wake it, made at its first sleep, and the timer
// that bounds each sleep. The first sleep ends when the subscription is
// confirmed (Ready), since the message may have been published before it:
// the caller tries again then. Later sleeps end at a message (Wake).
type sleeper struct {
	hub     *pubsub.Hub
	counts  bool // subscribe as a counting waiter (pubsub.SubscribeCounted)
	listens bool // subscribe as a listener (pubsub.Listen): the messages say something
	sub     *pubsub.Waiter
	timer   *time.Timer
}

// arm sets the timer to end the next sleep after d.
func (s *sleeper) arm(d time.Duration) {
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
}

// wakeUps returns the channel whose receive ends the next sleep on
// channel: nil without a channel (only the timer wakes); at the first
// sleep, the new subscription's Ready, or its Wake when joined (the
// caller joins waiters of this Client that are subscribed already); after
// that, the messages. A subscription that fails is made again at the next
// sleep.
func (s *sleeper) wakeUps(ctx context.Context, channel string, joined bool) (<-chan struct{}, error) {
	switch {
	case channel == "":
		return nil, nil
	case s.sub != nil:
		return s.sub.Wake(), nil
	}
	sub, err := s.subscribe(ctx, channel)
	switch {
	case err != nil:
		return nil, err
	case joined:
		s.sub = sub
		return sub.Wake(), nil
	}
	s.sub = sub
	return sub.Ready(), nil
}

// stop ends the sleeps: the timer stops and the subscription goes,
// passing on a wake-up that the caller did not use (used is false).
func (s *sleeper) stop(used bool) {
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.sub != nil {
		s.sub.Close(used)
	}
}

// waiter is the waiting side of a Lock: its sleeper and the Lock's place
// in this Client's queue for the lock (handoff.go).
type waiter struct {
	sleeper
	h       *handle
	req     request
	hands   bool            // the kind hands over: the Lock waits in a place
	place   *place          // made at the first sleep when hands is set
	last    error           // why the latest attempt failed, when the kind says
	joined  bool            // joined subscribed waiters of this Client: no attempt after subscribing
	spin    *backoff        // the kind is a spinner: each sleep is its next step at most
	sent    time.Time       // when the latest attempt answered "taken" was sent
	seq     int64           // the server's clock when it ran (attemptResult.seq)
	lockCtx context.Context // the lock context, once acquired
	ob      *lockObs        // nil without observers

	// early: a counting waiter subscribed before its first attempt
	// (joinCounted). spare: a counting waiter took a permit with more
	// left, or was woken by a message and handed a permit in the same
	// sleep: its wake-up is passed on.
	early, spare bool
}

// sleep is the Lock's sleep in the acquire loop (waiter.nap), and what a
// hand-over during it means: the lock taken (done, its hold registered),
// or handed over too late to be worth anything (given back: try again).
func (w *waiter) sleep(ctx context.Context, res attemptResult) (bool, error) {
	h := w.h
	g, err := w.nap(ctx, res)
	if err == nil && !g.ok && !g.unknown {
		g = w.handedByMessage()
	}
	req := w.req // the sleep's owner (placeOwner)
	switch {
	case g.unknown && w.selfKept():
		// A hand-over whose answer was lost may have given this
		// sleep's owner the permit; the next attempt has an owner of
		// its own and would never find it: give it back.
		grace(h.giveBack(req))
		return false, err
	case err != nil || !g.ok:
		return false, err
	case time.Since(g.start) >= validity(req.lease):
		grace(h.giveBack(req)) // handed over too late: try again
		return false, nil
	}
	w.lockCtx, err = h.register(ctx, req, g.token, g.start) // handed over by a release of this Client
	if err != nil {
		grace(h.giveBack(req))
	}
	return err == nil, err
}

// messageHander is implemented by kinds whose release hands the lock over
// to a waiter of any Client and says so in the message that wakes it (the
// fair lock's).
type messageHander interface {
	// handedOver reads a waiter's messages, oldest first, for a
	// hand-over that ran after the server's clock read after (in
	// microseconds): found, with the lease it set and the fencing token
	// it took (0 for none).
	handedOver(msgs []string, after int64) (lease time.Duration, token int64, found bool)
	// trustsMessages says whether this Client may take a hand-over
	// message as a grant at all (fairKind.trustsMessages).
	trustsMessages() bool
}

// handedByMessage returns the grant of a release, of any Client, that
// handed the lock over to the waiter and said so in the message that woke
// it (messageHander). Only a hand-over that ran after the waiter's latest
// answered attempt that found the lock taken counts (the message carries
// the server's clock, the answer too): an older one gave a hold that has
// ended since, or that attempt would have found the waiter holding. The
// hold's lease counts from when that attempt was sent, before the
// hand-over ran; an attempt without an answer does not count. A hand-over
// that took no token for a fenced waiter, or that set another lease than
// the waiter's, is not taken as one, nor one whose lease may be half
// gone counted from when that attempt was sent, nor any on a Client that
// does not hand over by message itself: the next attempt finds the owner
// holding the lock and sets the lease (and takes a token) itself.
func (w *waiter) handedByMessage() grant {
	k, ok := w.h.kind.(messageHander)
	if !ok || w.sub == nil || w.sent.IsZero() {
		return grant{}
	}
	msgs, _ := w.sub.Messages()
	lease, token, found := k.handedOver(msgs, w.seq)
	switch {
	case !found || w.req.fence && token == 0 || millis(lease) != millis(w.req.lease):
		return grant{}
	case time.Since(w.sent) >= validity(w.req.lease)/2 || !k.trustsMessages():
		// Counted from w.sent, half the lease may be gone already: the
		// watchdog's first renewal might come after the local deadline.
		// Or this Client's subscriptions may be where the release's
		// count does not reach. The next attempt finds the owner holding
		// the lock and sets the lease itself.
		return grant{}
	}
	return grant{ok: true, token: token, start: w.sent}
}

// joinCounted subscribes a counting waiter (a permit's) before its
// first attempt when this Client's subscription to the channel is live
// already, which costs Redis nothing: a message published after the
// attempt then wakes this waiter or another of this Client, and the
// attempt that otherwise follows the first sleep's subscription, for a
// message that may have come before it, is saved. A subscription not
// confirmed yet is dropped: the first sleep makes it as usual.
func (w *waiter) joinCounted(ctx context.Context) {
	channel := w.h.kind.channel(w.req.owner)
	if channel == "" || w.hub.Waiters(channel) == 0 {
		return
	}
	sub, err := w.hub.SubscribeCounted(ctx, channel)
	if err != nil {
		return
	}
	select {
	case <-sub.Ready():
		w.sub, w.joined, w.early = sub, true, true
	default:
		sub.Close(false)
	}
}

// selfKept reports whether the waiter's kind makes an owner per attempt.
func (w *waiter) selfKept() bool {
	_, ok := w.h.kind.(selfKept)
	return ok
}

// busy is the error of a TryLock that found the lock held.
func (w *waiter) busy(res attemptResult) error { return notObtained(w.h.name, res.reason) }

// gate is the reach gate the Lock waits at in an outage.
func (w *waiter) gate() *transport.Gate { return reachGate(w.h.c, w.h.kind) }

// outlast reports whether the Lock goes on trying after err, its
// attempts having failed for failing: for a kind that is patient, while
// Redis has not answered for less than its patience; for any kind, while
// attempts handed aside have run out of their bound (errAsideTimeout) for
// less than asidePatience. Each try again is logged.
func (w *waiter) outlast(err error, failing time.Duration) bool {
	var patience time.Duration
	if p, ok := w.h.kind.(patient); ok && noAnswer(err) {
		patience = p.patience()
	}
	if errors.Is(err, errAsideTimeout) {
		patience = max(patience, asidePatience)
	}
	if patience == 0 || failing > patience {
		return false
	}
	w.h.c.cfg.logger.Warn("dlock: attempt failed without an answer; trying again", "lock", w.h.name, "error", err)
	return true
}

func (w *waiter) observer() *lockObs { return w.ob }

// end ends the wait: the subscription goes, passing on a wake-up that a
// Lock that failed did not use, and the observers are told.
//
// A counting waiter (a permit's) passes on any wake-up left in its buffer,
// also when it took its permit: once it took the wake-up that woke it, it
// stays first in its Client's line with an empty buffer until it ends,
// and a message for another permit freed meanwhile lands there. At worst
// the next waiter makes one attempt too many. A spare wake-up (the one it
// took was for another waiter, or more permits are left) is put back
// first.
func (w *waiter) end(err error) {
	switch {
	case w.spare && w.lockCtx != nil:
		w.sub.Return()
		w.sleeper.stop(false)
	case w.counts:
		w.sleeper.stop(false)
	default:
		w.sleeper.stop(w.lockCtx != nil)
	}
	w.ob.done(w.lockCtx, err)
}

// nap waits after an attempt that found the lock held: until an unlock
// message, the end of the current hold's lease (res.ttl), a hand-over from
// a release of this Client, or the end of ctx. The first sleep subscribes
// and ends when the subscription is confirmed, since the unlock may have
// been published before. A waiter of a spinner kind (no channel) sleeps
// its backoff's next step when that is shorter than res.ttl. The grant is
// ok when the lock was handed over, unknown (also with an error) when a
// hand-over got no answer.
func (w *waiter) nap(ctx context.Context, res attemptResult) (grant, error) {
	h := w.h
	w.last = res.reason
	d := res.ttl
	if d < 0 {
		d = pollNoExpiry
	}
	if w.spin != nil {
		d = min(d, w.spin.step())
	}
	if err := w.placeOwner(); err != nil {
		return grant{}, err
	}
	w.arm(d)
	wake, err := w.wakeUps(ctx)
	if err != nil {
		return grant{}, err
	}
	g := w.wait(ctx, wake)
	if g.ok {
		return g, nil // the lock is ours even if ctx ended meanwhile
	}
	switch {
	case ctxDone(ctx):
		return g, h.gaveUp(ctx, w.req, w.last)
	case h.c.isClosed():
		// The Redis client may still work: leave the queue rather than
		// hold it up like a dead process until our deadline.
		h.leave(w.req)
		return g, ErrClosed
	}
	return g, nil
}

// placeOwner gives a waiter of a kind that makes an owner per attempt (a
// permit's id), and that sleeps in a place, an owner of its own for the
// sleep: a release of this Client hands the permit to that id. Not the
// latest attempt's: an attempt that failed without an answer may hold it
// in Redis, and its give-back, in the background, would take the permit
// handed over (or the hand-over, finding it held, would take the
// releaser's permit for the waiter's). Each attempt, and so each sleep,
// has an id no earlier one used.
func (w *waiter) placeOwner() error {
	k, ok := w.h.kind.(selfKept)
	if !ok || !w.hands {
		return nil
	}
	owner, err := k.newOwner()
	if err != nil {
		return err
	}
	w.req.owner = owner
	return nil
}

// earlySubscriber is implemented by kinds whose waiters can subscribe
// before their first attempt.
type earlySubscriber interface {
	// subscribeEarly reports whether a Lock that may wait should subscribe
	// to its channel before its first attempt (the lock is likely taken).
	subscribeEarly() bool
}

// subscribeEarly subscribes a Lock that may wait before its first attempt,
// when the kind says the lock is likely taken, and waits for Redis to
// confirm it. Its first sleep then waits for the messages at once: the
// attempt that follows a new subscription (a message may have come
// before it) is saved, one round trip per contended Lock. A kind asks
// for it where a Lock has a channel of its own (the fair lock's), which
// no other waiter of this Client can be subscribed to already. A
// subscription that fails or is not confirmed within earlyConfirm (or
// before ctx ends) is dropped and left to the first sleep, as without
// this: a subscription Redis refuses or never confirms must not keep the
// Lock from trying a lock that may be free.
func (w *waiter) subscribeEarly(ctx context.Context) {
	k, ok := w.h.kind.(earlySubscriber)
	if !ok || !w.req.wait || w.sub != nil || w.h.c.holds.held(w.h.holdKey(w.req.owner)) != nil || !k.subscribeEarly() {
		return
	}
	sub, err := w.subscribe(ctx, w.h.kind.channel(w.req.owner))
	if err != nil {
		return
	}
	unconfirmed := time.NewTimer(earlyConfirm)
	defer unconfirmed.Stop()
	select {
	case <-sub.Ready():
		w.sub = sub
	case <-unconfirmed.C:
		sub.Close(false)
	case <-ctx.Done():
		sub.Close(false)
	case <-w.h.c.done:
		sub.Close(false)
	}
}

// earlyConfirm bounds how long a Lock waits for the confirmation of a
// subscription made before its first attempt (subscribeEarly): a round
// trip, with room for a loaded machine, and no longer than a free fair
// lock goes untold to its head waiter (fairFreeCheck).
const earlyConfirm = fairFreeCheck

// subscribe subscribes to channel through the hub. Opening the hub's
// connection to a server that does not answer can take the Redis client's
// dial and read timeouts whatever ctx says, so when ctx can end, subscribe
// returns when it ends, and a subscription made after that is closed in
// the background.
func (s *sleeper) subscribe(ctx context.Context, channel string) (*pubsub.Waiter, error) {
	hub, sub := s.hub, s.hub.Subscribe
	switch {
	case s.counts:
		sub = hub.SubscribeCounted
	case s.listens:
		sub = hub.Listen
	}
	if ctx.Done() == nil {
		return sub(ctx, channel)
	}
	type result struct {
		sub *pubsub.Waiter
		err error
	}
	done := make(chan result, 1)
	go func() {
		sub, err := sub(ctx, channel)
		done <- result{sub, err}
	}()
	select {
	case r := <-done:
		return r.sub, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.sub != nil {
				r.sub.Close(false)
			}
		}()
		return nil, ctx.Err()
	}
}

// wait sleeps in the lock's queue, if the kind hands over, until wake
// (see wakeUps: Ready at the first sleep, then the unlock messages), the
// timer, a hand-over or the end of ctx. A release of this Client that
// chose the waiter but freed the lock instead, for other processes' turn,
// puts it back in the queue if it was not woken already: it then waits
// for the unlock message like the waiters of every other process, rather
// than race them from up close. A waiter that wake or the timer woke
// before it was told of the free returns at once, to try again: the
// message it would wait for came already.
func (w *waiter) wait(ctx context.Context, wake <-chan struct{}) grant {
	if w.hands && w.place == nil {
		w.place = w.h.newPlace(w.req)
		w.req.queued = true
		if w.early {
			w.h.c.queues.subscribed(w.place) // confirmed before the first attempt
		}
	}
	for {
		var granted <-chan grant
		if w.place != nil {
			// A kind that makes an owner per attempt (a permit's id) is
			// handed over to the sleep's own (placeOwner): the place
			// takes it along. No release reads it before the place is
			// queued.
			w.place.req = w.req
			w.h.c.queues.enqueue(w.h.queueKey(), w.place)
			granted = w.place.grant
		}
		var g grant
		woken := false // by wake (Ready at the first sleep, else the unlock message) or the timer: used up
		select {
		case <-wake:
			woken = true
		case <-w.timer.C:
			woken = true
		case g = <-granted:
		case <-ctx.Done():
		case <-w.h.c.done: // Close: a first sleep waits on Ready, which may never come
		}
		if !g.ok && !g.freed && w.place != nil {
			g = w.handedOver(ctx)
		}
		w.spare = w.spare || w.counts && g.ok && woken && w.sub != nil && wake == w.sub.Wake()
		// A free told after the wake-up that came with it: waiting again
		// would wait for a message that came already (and a timer that
		// fired), with the lock free.
		if !g.freed || woken || ctxDone(ctx) {
			return g
		}
	}
}

// wakeUps returns the channel that wakes the waiter (sleeper.wakeUps, on
// the kind's channel: none for a kind without unlock messages). A waiter
// past its first sleep is subscribed: its place says so, for the releases
// of this Client that choose whom to hand the lock to (handoff.go).
func (w *waiter) wakeUps(ctx context.Context) (<-chan struct{}, error) {
	h := w.h
	if w.sub != nil && w.place != nil {
		h.c.queues.subscribed(w.place)
	}
	wake, err := w.sleeper.wakeUps(ctx, h.kind.channel(w.req.owner), w.joined)
	switch {
	case err == nil:
		return wake, nil
	case ctxDone(ctx):
		// Also when ctx's timer has yet to fire: a dial or socket
		// deadline at ctx's deadline can fail the subscription first.
		return nil, h.gaveUp(ctx, w.req, w.last)
	case errors.Is(err, pubsub.ErrClosed):
		return nil, ErrClosed // Close raced this Lock
	}
	if _, ok := h.kind.(patient); ok { // it outlasts a failover: poll this sleep
		h.c.cfg.logger.Warn("dlock: subscribing failed; polling meanwhile", "lock", h.name, "error", err)
		return nil, nil
	}
	h.leave(w.req)
	return nil, fmt.Errorf("dlock: lock %q: subscribe: %w", h.name, err)
}

// handedOver takes the waiter out of its lock's queue after a sleep and
// returns the outcome of a hand-over that chose it meanwhile, if any. When
// ctx ends while the hand-over is still on its way, a lock it hands over
// is given back in the background.
func (w *waiter) handedOver(ctx context.Context) grant {
	h := w.h
	if !h.c.queues.dequeue(h.queueKey(), w.place) {
		select {
		case g := <-w.place.grant: // told before we woke
			return g
		default:
			return grant{}
		}
	}
	select {
	case g := <-w.place.grant:
		return g
	case <-ctx.Done():
		h.c.work.run(h.holdKey(w.req.owner), func(context.Context) {
			if g := <-w.place.grant; g.ok || g.unknown {
				grace(h.giveBack(w.req))
			}
		})
		return grant{}
	}
}
