package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The holds of a Client's owners, and the registry that records them: what
// Lock registers, Unlock drops, the watchdog renews and a loss ends. Redis
// has the truth of every hold; the registry has what the Client needs to
// answer without asking it (a re-entry, a hold count, a local deadline)
// and the lock contexts to end when a hold goes.

// lockKey names a lock of a Client: its key and role (the halves of a
// read-write lock share a key).
type lockKey struct{ key, role string }

// holdKey names one owner's hold on one lock.
type holdKey struct {
	key, field string
}

// hold is what the Client knows of one owner's hold on one lock: Redis
// marks the hold with the owner's field; the Client counts its
// acquisitions (one per successful Lock not yet matched by an Unlock) and
// keeps the local deadline by which the lease must have been confirmed
// again. Fields are guarded by the registry's mutex; op is made under it
// when first needed and never changed after.
//
// A Client may keep a million holds: each field here costs that many
// times (TestHoldHeap guards the total).
type hold struct {
	c        *Client
	kind     kind
	owner    string
	lease    time.Duration
	acqs     []*acquisition
	token    int64         // the latest fencing token, 0 if none
	until    atomicInstant // the local deadline (the deadline queue may have it earlier: expiry.go)
	slot     int32         // the hold's index in the deadline queue; -1 when not queued, which is when it left the registry
	watchdog bool          // renewed by the watchdog, rather than a fixed lease (which it checks)
	holder   bool          // the registry's pick among the Client's holds on its lock and role (heldByOther)
	next     *hold         // the registry's next hold with the same key
	// op is held while a re-entry's attempt is in flight and while an
	// Unlock decides whether it releases the last acquisition, so that a
	// re-entry is never counted on a hold whose release is on its way.
	// Most holds never need it: lockOp makes it.
	op chan struct{}
}

// instant is a point in time, as the monotonic nanoseconds since the
// package's epoch: a hold's deadline in 8 bytes, where a time.Time takes 24.
type instant int64

// epoch is when instants count from.
var epoch = time.Now()

// atomicInstant is an instant written under the registry's mutex and read
// without it by a lock context's look at its deadline (overdue).
type atomicInstant struct{ v atomic.Int64 }

func (a *atomicInstant) get() instant  { return instant(a.v.Load()) }
func (a *atomicInstant) set(i instant) { a.v.Store(int64(i)) }

func instantOf(t time.Time) instant { return instant(t.Sub(epoch)) }

func (i instant) time() time.Time { return epoch.Add(time.Duration(i)) }

// valid is how long after a renewal is sent the hold counts as valid.
func (hd *hold) valid() time.Duration { return validity(hd.lease) }

func (hd *hold) holdKey() holdKey { return holdKey{hd.kind.key(), hd.kind.field(hd.owner)} }

// lockOp takes hd.op, unless ctx ends first.
func (hd *hold) lockOp(ctx context.Context) error {
	select {
	case hd.c.holds.opOf(hd) <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

// unlockOp gives back hd.op, which lockOp made.
func (hd *hold) unlockOp() { <-hd.op }

// opOf returns hd.op, made on first use.
func (r *registry) opOf(hd *hold) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hd.op == nil {
		hd.op = make(chan struct{}, 1)
	}
	return hd.op
}

// acquisition is one successful Lock, and the lock context Lock returned
// for it: a context that the ctx given to Lock does not cancel (it has its
// values), carrying the owner (under ownerKey), the acquisition (under its
// handle's acqKey) and, when fenced, the token (under tokenKey). It ends
// with cause (end) when its hold is unlocked or lost. Its cancellation is
// a context.WithCancelCause made only when something asks for it (Done,
// context.Cause, a context derived from it): a Client holding a million
// locks whose contexts nobody watches keeps no channel for them.
// unlocked is guarded by the registry's mutex, the rest of the
// cancellation by mu.
type acquisition struct {
	hold     *hold
	parent   context.Context
	token    int64
	fenced   bool
	unlocked bool // Unlock was called with it

	mu    sync.Mutex
	cause error         // why it ended; nil while it stands
	done  *cancellation // once asked for
}

// cancellation is a lock context's context.WithCancelCause.
type cancellation struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// end ends the lock context with cause; a later end changes nothing.
func (a *acquisition) end(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cause != nil {
		return
	}
	a.cause = cause
	if a.done != nil {
		a.done.cancel(cause)
	}
}

// cancellation returns the context that carries the lock context's end,
// made on first use (cancelled at once if it ended already).
func (a *acquisition) cancellation() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(a.parent))
		a.done = &cancellation{ctx, cancel}
		if a.cause != nil {
			cancel(a.cause)
		}
	}
	return a.done.ctx
}

// Deadline reports no deadline: a lock context ends with its hold.
func (a *acquisition) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the hold is unlocked or lost; at once when the
// hold's local deadline has passed (overdue).
func (a *acquisition) Done() <-chan struct{} {
	a.overdue()
	return a.cancellation().Done()
}

// Err is context.Canceled once the hold is unlocked or lost, nil before;
// a hold whose local deadline has passed is lost when Err looks
// (overdue).
func (a *acquisition) Err() error {
	if err := a.err(); err != nil || !a.overdue() {
		return err
	}
	return a.err()
}

// err is Err as the lock context stands, without looking at the clock.
func (a *acquisition) err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.done != nil:
		return a.done.ctx.Err()
	case a.cause != nil:
		return context.Canceled
	}
	return nil
}

// overdue ends a, as lost, when its hold's local deadline has passed but
// a still stands, and reports whether it did: a process resumed after a
// pause past its lease (SIGSTOP, a frozen VM, a long stall) may run its
// holder's next check before the deadline queue's timer, or while the
// timer's sweep has taken the hold out but not yet ended its lock
// contexts; that check must find the lock context ended. Every look at
// the lock context's state (Err, Done, context.Cause, Token, FenceOf)
// comes here first; while the deadline is ahead it reads one atomic.
//
// The lock contexts end on the looker's goroutine; the log line and
// Observer.Lost come from a goroutine of their own, since a look at a
// context must not run the user's hooks (the looker may hold a lock that
// its Lost hook takes).
func (a *acquisition) overdue() bool {
	hd := a.hold
	if hd == nil {
		return false
	}
	acqs, ok, taken := hd.c.holds.overdue(a)
	switch {
	case ok:
		err := leaseRanOut(hd)
		for _, x := range acqs {
			x.end(err)
		}
		go hd.c.tellLost(hd, acqs, err, hd.c.holds.now())
	case taken && !a.ended(): // another path took the hold out, and ends a soon
		a.end(leaseRanOut(hd))
	default:
		return false
	}
	return true
}

// ended reports whether a has ended.
func (a *acquisition) ended() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cause != nil
}

// Value answers the lock context's keys, and the parent's otherwise. A
// key of type *int is how package context asks a context for the
// cancelCtx under it (context.Cause, WithCancel and AfterFunc on a lock
// context): the cancellation answers it, so that the cause reaches them
// and the parent's own cancellation never does.
func (a *acquisition) Value(key any) any {
	hd := a.hold
	switch k := key.(type) {
	case acqKey:
		if k.c == hd.c && k.key == hd.kind.key() && k.role == hd.kind.role() {
			return a
		}
	case tokenKey:
		if a.fenced {
			a.overdue()
			return a.token
		}
	case fenceKey:
		if a.fenced {
			a.overdue()
			return Fence{Token: a.token, Holder: hd.owner}
		}
	case ownerKey:
		if k.c == hd.c {
			return hd.owner
		}
	case *int:
		a.overdue()
		return a.cancellation().Value(key)
	}
	return a.parent.Value(key)
}

// String names the lock context, as package context names its own.
func (a *acquisition) String() string { return "dlock.lockContext(" + a.hold.kind.key() + ")" }

// Context keys. A lock context carries the owner (per Client, so that
// nested locks of one call chain share it, like a thread id in Java) and
// its acquisition (per lock, for Unlock and Token).
type (
	ownerKey struct{ c *Client }
	acqKey   struct {
		c         *Client
		key, role string
	}
	tokenKey struct{}
	fenceKey struct{} // FenceOf: the token with its owner
)

func ownerFrom(ctx context.Context, c *Client) (string, bool) {
	o, ok := ctx.Value(ownerKey{c}).(string)
	return o, ok
}

// Token returns the fencing token of the innermost fenced lock whose lock
// context ctx is or descends from. ok is false when there is none (the lock
// was taken without WithFencing).
func Token(ctx context.Context) (token int64, ok bool) {
	token, ok = ctx.Value(tokenKey{}).(int64)
	return token, ok
}

// register records a successful acquisition by req.owner, sent at start,
// and returns its lock context. The lease is counted from start, before
// the command was sent, so the local deadline is never later than Redis's.
// It fails only when the Client was closed meanwhile. A kind that keeps
// its acquisitions itself (selfKept) records them instead.
func (h *handle) register(ctx context.Context, req request, token int64, start time.Time) (context.Context, error) {
	if k, ok := h.kind.(selfKept); ok {
		return k.keep(ctx, req, start)
	}
	acq := &acquisition{parent: ctx, token: token, fenced: req.fence}
	if err := h.c.holds.add(h, req, acq, start); err != nil {
		return nil, err
	}
	return acq, nil
}

// registry is the Client's record of its holds, and the lock that guards
// them: per owner's hold on a lock, the hold; per lock, one of this
// Client's holds on it (its holder, for busyHere); whether the Client was
// closed (add refuses then). Its mutex guards the maps and the fields of each
// hold and acquisition that say so; under it the registry calls out only
// to the lease keeper (Add, Remove), so that a hold is kept exactly while
// it is registered. The zero value is an empty registry.
type registry struct {
	mu sync.Mutex
	// holds has, per key, the Client's holds on it: the newest, and the
	// others chained behind it (hold.next). A key has one hold but for
	// shared read holds, the two halves of a read-write lock and kinds
	// that share a name: one map with 24-byte entries, where a map per
	// hold key and one per lock took 80 bytes a hold.
	holds  map[string]*hold
	dl     deadlines // the holds' local deadlines (expiry.go)
	closed bool
	// skew is how far ahead of time.Now the Client's clock reads: 0 but
	// in tests that play a pause, moving the clock past leases without
	// letting any timer run (what a process stopped and resumed sees).
	skew atomic.Int64
}

// overdue takes a's hold out of the registry when its local deadline has
// passed by the Client's clock, and returns its acquisitions (ok), all in
// one hold of the mutex, so that a renewal cannot move the deadline in
// between. taken says that the deadline has passed but another path took
// the hold out already (the sweep, a loss), which ends a soon; not an
// Unlock of a, nor Close, which end it with causes of their own.
func (r *registry) overdue(a *acquisition) (acqs []*acquisition, ok, taken bool) {
	hd := a.hold
	if hd.until.get() > instantOf(r.now()) {
		return nil, false, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case hd.until.get() > instantOf(r.now()): // renewed meanwhile
		return nil, false, false
	case !r.current(hd):
		return nil, false, !a.unlocked && !r.closed
	}
	r.drop(hd)
	acqs, hd.acqs = hd.acqs, nil
	return acqs, true, false
}

// now is the Client's monotonic clock, by which its holds' and permits'
// local deadlines pass.
func (r *registry) now() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }

// find returns the hold k, or nil. r.mu must be held.
func (r *registry) find(k holdKey) *hold {
	for hd := r.holds[k.key]; hd != nil; hd = hd.next {
		if hd.kind.field(hd.owner) == k.field {
			return hd
		}
	}
	return nil
}

// link adds hd to the holds of its key, as the holder of its lock. r.mu
// must be held.
func (r *registry) link(hd *hold) {
	key, role := hd.kind.key(), hd.kind.role()
	if r.holds == nil {
		r.holds = map[string]*hold{}
	}
	for o := r.holds[key]; o != nil; o = o.next {
		if o.holder && o.kind.role() == role {
			o.holder = false
		}
	}
	hd.holder, hd.next = true, r.holds[key]
	r.holds[key] = hd
}

// unlink takes hd out of the holds of its key. r.mu must be held.
func (r *registry) unlink(hd *hold) {
	key := hd.kind.key()
	switch head := r.holds[key]; {
	case head == hd && hd.next == nil:
		delete(r.holds, key)
	case head == hd:
		r.holds[key] = hd.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == hd {
				p.next = hd.next
				break
			}
		}
	}
	hd.holder, hd.next = false, nil
}

// add records acq, an acquisition of h's lock by req.owner sent at start:
// in a new hold, which the lease keeper keeps from now on, or in the
// owner's hold (a re-entry, which set the lease again). It fails with
// ErrClosed once close was called.
func (r *registry) add(h *handle, req request, acq *acquisition, start time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	hd := r.find(h.holdKey(req.owner))
	if hd == nil {
		hd = newHold(h, req, start)
		r.link(hd)
		r.queue(hd)          // lost when its local deadline passes
		h.c.watchdog.Add(hd) // renews a watched hold, checks a fixed lease
	} else {
		hd.extend(start) // a re-entry set the lease again
	}
	hd.token = max(hd.token, acq.token)
	acq.hold = hd
	hd.acqs = append(hd.acqs, acq)
	return nil
}

// newHold returns req.owner's hold on h's lock, taken by a request sent at
// start, with its local deadline, not yet queued.
func newHold(h *handle, req request, start time.Time) *hold {
	hd := &hold{c: h.c, kind: h.kind, owner: req.owner, lease: req.lease, watchdog: !h.cfg.hasLease, slot: -1}
	hd.until.set(instantOf(start.Add(hd.valid())))
	return hd
}

// extend moves the hold's local deadline after a request sent at start set
// its lease again; the deadline queue finds it moved when the hold comes
// up. The registry's mutex must be held.
func (hd *hold) extend(start time.Time) {
	if until := instantOf(start.Add(hd.valid())); until > hd.until.get() {
		hd.until.set(until)
	}
}

// held returns the hold k, if the Client has it.
func (r *registry) held(k holdKey) *hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.find(k)
}

// count is the hold count to report for the owner's hold k when Redis
// counts n: the Client's count of its acquisitions, if it has the hold.
func (r *registry) count(k holdKey, n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hd := r.find(k); hd != nil && len(hd.acqs) > 0 {
		return len(hd.acqs)
	}
	return n
}

// heldByOther reports whether another owner than owner holds lock qk
// through this Client, how long that hold's lease has left, and whether
// its kind's release is silent: publishes nothing (a SpinLock's).
func (r *registry) heldByOther(qk lockKey, owner string) (left time.Duration, silent, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for hd := r.holds[qk.key]; hd != nil; hd = hd.next {
		if hd.holder && hd.kind.role() == qk.role {
			if hd.owner == owner {
				break
			}
			return time.Until(hd.until.get().time()), hd.kind.channel(hd.owner) == "", true
		}
	}
	return 0, false, false
}

// registered reports whether hd is still the Client's record of its hold.
func (r *registry) registered(hd *hold) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current(hd)
}

// current is registered with r.mu held: a hold is queued for its
// deadline exactly while it is registered (add, drop, close).
func (r *registry) current(hd *hold) bool { return hd.slot >= 0 }

// latest returns hd's latest fencing token, for a re-entry; ok is false
// when hd was released or lost.
func (r *registry) latest(hd *hold) (token int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return hd.token, r.current(hd)
}

// holding reports whether acq still stands for a hold: not unlocked, and
// its hold not released or lost.
func (r *registry) holding(acq *acquisition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !acq.unlocked && r.current(acq.hold)
}

// reentered reports whether acq is a re-entry: not its hold's first
// acquisition still counted.
func (r *registry) reentered(acq *acquisition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(acq.hold.acqs) > 0 && acq.hold.acqs[0] != acq
}

// deadline returns hd's local deadline.
func (r *registry) deadline(hd *hold) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return hd.until.get().time()
}

// dropAcquisition takes acq out of its hold for Unlock, with hd.op held.
// When it was the hold's last acquisition (last), the hold leaves the
// registry, the lease keeper and its timer before its release is sent
// (which is what keeps renewal from outliving the lock, Redisson #7272).
// The error is errReleased or errLost when there is nothing to release.
// The busy mark under which the release runs is the caller's
// (handle.dropAcquisition).
func (r *registry) dropAcquisition(acq *acquisition) (last bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hd := acq.hold
	if acq.unlocked {
		return false, errReleased
	}
	acq.unlocked = true
	if !r.current(hd) {
		return false, errLost
	}
	hd.acqs = slices.DeleteFunc(hd.acqs, func(a *acquisition) bool { return a == acq })
	if len(hd.acqs) > 0 {
		return false, nil
	}
	r.drop(hd)
	return true, nil
}

// Why dropAcquisition refuses.
var (
	errReleased = errors.New("this hold was already released")
	errLost     = errors.New("the lock was lost")
)

// lose ends a hold whose lock is gone and tells its holder: every lock
// context of the hold is cancelled with cause err. A hold that was already
// released or replaced is left alone.
func (hd *hold) lose(err error) {
	acqs, ok := hd.c.holds.dropHold(hd)
	if !ok {
		return
	}
	hd.c.ended(hd, acqs, err)
}

// ended tells the holder of hd, which left the registry with acqs, that
// the lock is lost with cause err: a log line, Lost, and every lock
// context cancelled.
func (c *Client) ended(hd *hold, acqs []*acquisition, err error) {
	c.tellLost(hd, acqs, err, c.holds.now())
	for _, a := range acqs {
		a.end(err)
	}
}

// tellLost logs the loss of hd, whose acquisitions were acqs, at at, and
// reports it to observers (Lost).
func (c *Client) tellLost(hd *hold, acqs []*acquisition, err error, at time.Time) {
	c.cfg.logger.Warn("dlock: lock lost", "lock", hd.kind.key(), "owner", hd.owner, "error", err)
	c.observeLost(hd, acqs, err, at)
}

// dropHold drops hd, unless it was released or replaced already (ok
// false), and returns its acquisitions, for lose.
func (r *registry) dropHold(hd *hold) (acqs []*acquisition, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.current(hd) {
		return nil, false
	}
	r.drop(hd)
	acqs, hd.acqs = hd.acqs, nil
	return acqs, true
}

// drop removes a hold from the registry, the lease keeper and the
// deadline queue. r.mu must be held.
func (r *registry) drop(hd *hold) {
	r.unlink(hd)
	r.unqueue(hd)
	hd.c.watchdog.Remove(hd)
}

// renewed moves the local deadline of each hold that a renewal sent at
// start found alive, under one hold of the mutex for the chunk.
func (r *registry) renewed(holds []*hold, alive []bool, start time.Time) {
	var lease time.Duration // the holds of a chunk share one lease
	var until instant
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, hd := range holds {
		if !alive[i] || !r.current(hd) {
			continue
		}
		if hd.lease != lease {
			lease, until = hd.lease, instantOf(start.Add(hd.valid()))
		}
		hd.until.set(max(hd.until.get(), until))
	}
}

// extended sets a hold's local deadline to valid after start, when Extend
// set its lease at start.
func (r *registry) extended(hd *hold, start time.Time, valid time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current(hd) {
		hd.until.set(instantOf(start.Add(valid)))
		r.moved(hd)
	}
}

// close refuses every later add and returns the holds registered until
// now, which leave the registry: Close ends them.
func (r *registry) close() []*hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	holds := make([]*hold, len(r.dl.heap)) // every registered hold is queued
	r.holds = nil
	for i, q := range r.dl.heap {
		holds[i] = q.hd
		q.hd.slot, q.hd.holder, q.hd.next = -1, false, nil
	}
	r.dl.heap = nil
	r.arm() // stops the timer
	return holds
}
