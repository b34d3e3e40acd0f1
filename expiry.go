package dlock

import (
	"fmt"
	"time"
)

// The local deadlines of a Client's holds, in one queue with one timer.
//
// A hold is lost when its local deadline passes before a renewal confirms
// its lease. A timer per hold did that with a goroutine per firing: when
// renewals fell behind (more holds than Redis renews in a lease), every
// overdue hold started its own goroutine, and hundreds of thousands of
// them piled up on the registry's mutex while the watchdog needed it. The
// queue is a min-heap of the holds by the deadline they are queued at,
// and one timer per Client fires at the earliest: its sweep ends, in one
// goroutine, every hold whose deadline has passed.
//
// A renewal moves a hold's deadline later without touching the queue
// (the common case, a hundred thousand times a second at a million
// holds): the sweep finds the hold's deadline moved when the hold comes
// up, and queues it again at its new deadline. Only a deadline moved
// earlier (Extend with a shorter lease) moves the hold up the queue.

// sweepBatch is how many due holds a sweep handles per hold of the
// registry's mutex, so that Lock and Unlock wait for at most that many.
const sweepBatch = 1024

// deadlines is the queue; the registry's mutex guards it.
type deadlines struct {
	// heap is a 4-ary min-heap by due: a million holds are 10 levels
	// deep, and the four children of an entry share a cache line, so
	// that moving a hold down reads about one hold per level (the one it
	// swaps with, to set its slot) rather than three.
	heap  []deadline
	timer *time.Timer // fires sweep at heap[0].due; nil before the first hold
	armed instant     // when timer fires; zero when stopped
}

// deadline is a hold in the queue, with the deadline it is queued at (not
// after its until), kept here so that ordering the queue reads no hold.
type deadline struct {
	due instant
	hd  *hold
}

// arity is the number of children of an entry of the heap.
const arity = 4

// queue adds hd at its deadline. r.mu must be held.
func (r *registry) queue(hd *hold) {
	hd.slot = int32(len(r.dl.heap))
	r.dl.heap = append(r.dl.heap, deadline{hd.until.get(), hd})
	r.up(int(hd.slot))
	r.arm()
}

// unqueue removes hd from the queue, if it is there. r.mu must be held.
func (r *registry) unqueue(hd *hold) {
	i := int(hd.slot)
	if i < 0 {
		return
	}
	last := len(r.dl.heap) - 1
	r.swap(i, last)
	r.dl.heap[last] = deadline{}
	r.dl.heap = r.dl.heap[:last]
	hd.slot = -1
	if i < last {
		r.down(i)
		r.up(i)
	}
	r.arm()
}

// moved tells the queue that hd's deadline changed: a deadline moved
// earlier moves it up the queue now; a later one waits for the sweep.
// r.mu must be held.
func (r *registry) moved(hd *hold) {
	i := int(hd.slot)
	if i < 0 || hd.until.get() >= r.dl.heap[i].due {
		return
	}
	r.dl.heap[i].due = hd.until.get()
	r.up(i)
	r.arm()
}

// arm sets the timer to the earliest deadline queued, or stops it when
// the queue is empty. r.mu must be held.
func (r *registry) arm() {
	if len(r.dl.heap) == 0 {
		if r.dl.timer != nil && r.dl.armed != 0 {
			r.dl.timer.Stop()
			r.dl.armed = 0
		}
		return
	}
	at := r.dl.heap[0].due
	switch {
	case at == r.dl.armed:
	case r.dl.timer == nil:
		r.dl.timer = time.AfterFunc(time.Until(at.time()), r.sweep)
	default:
		r.dl.timer.Reset(time.Until(at.time()))
	}
	r.dl.armed = at
}

// sweep ends every hold whose local deadline has passed: each leaves the
// registry, and its lock contexts are cancelled with ErrLockLost. A hold
// whose deadline a renewal moved is queued again at it. It runs on the
// timer's goroutine; two sweeps may overlap and share the work.
func (r *registry) sweep() {
	for {
		lost, more := r.sweepSome(r.now())
		for _, l := range lost {
			l.hd.c.ended(l.hd, l.acqs, leaseRanOut(l.hd))
		}
		if !more {
			return
		}
	}
}

// leaseRanOut is why a hold whose local deadline passed was lost.
func leaseRanOut(hd *hold) error {
	return fmt.Errorf("%w: %q: lease of %v ran out before it was renewed", ErrLockLost, hd.kind.lockName(), hd.lease)
}

// sweepSome takes up to sweepBatch holds whose deadline has passed at now
// out of the registry and returns them, with more set when others may
// remain; and re-arms the timer.
func (r *registry) sweepSome(now time.Time) (lost []lostHold, more bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dl.armed = 0 // the timer fired, or a sweep is under way
	defer r.arm()
	at := instantOf(now)
	for n := 0; len(r.dl.heap) > 0 && r.dl.heap[0].due <= at; n++ {
		if n == sweepBatch {
			return lost, true
		}
		hd := r.dl.heap[0].hd
		if hd.until.get() > at { // renewed meanwhile: queue it at its deadline
			r.dl.heap[0].due = hd.until.get()
			r.down(0)
			continue
		}
		r.drop(hd) // unqueues it
		lost = append(lost, lostHold{hd, hd.acqs})
		hd.acqs = nil
	}
	return lost, false
}

// lostHold is a hold that sweep took out of the registry, with the
// acquisitions whose lock contexts it ends.
type lostHold struct {
	hd   *hold
	acqs []*acquisition
}

func (r *registry) less(i, j int) bool { return r.dl.heap[i].due < r.dl.heap[j].due }

func (r *registry) swap(i, j int) {
	h := r.dl.heap
	h[i], h[j] = h[j], h[i]
	h[i].hd.slot, h[j].hd.slot = int32(i), int32(j)
}

func (r *registry) up(i int) {
	for i > 0 {
		p := (i - 1) / arity
		if !r.less(i, p) {
			return
		}
		r.swap(i, p)
		i = p
	}
}

func (r *registry) down(i int) {
	n := len(r.dl.heap)
	for {
		first := arity*i + 1
		if first >= n {
			return
		}
		c := first // the earliest child
		for k := first + 1; k < min(first+arity, n); k++ {
			if r.less(k, c) {
				c = k
			}
		}
		if !r.less(c, i) {
			return
		}
		r.swap(i, c)
		i = c
	}
}
