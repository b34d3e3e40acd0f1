package main

import (
	"math"
	"slices"
	"strings"
	"time"
)

const (
	// histWindow is how far back dlock ui's charts go.
	histWindow = 15 * time.Minute
	// histBucket is the width of one point of the charts.
	histBucket = 30 * time.Second
	// histMaxEvents bounds the memory of each kind of event kept.
	histMaxEvents = 500_000
)

// uiEvent is something the sampler inferred at a sample: n acquisitions
// of lock name, or one wait of n milliseconds.
type uiEvent struct {
	at   time.Time
	name string
	n    int64
}

// uiHistory is what the sampler remembers from sample to sample: who it
// saw hold and wait for each lock since when, and the acquisitions and
// waits it inferred over the last histWindow. A sampler sees states, not
// events: see observe.
type uiHistory struct {
	samples int
	first   time.Time            // the first sample
	holds   map[string]time.Time // lock "\x00" owner (or permit id): first seen holding
	tokens  map[string]int64     // lock: its fencing token at the last sample
	queued  map[string]time.Time // lock "\x00" owner: first seen in the fair queue
	acqs    []uiEvent
	waits   []uiEvent
}

func (h *uiHistory) init() {
	h.holds, h.tokens, h.queued = map[string]time.Time{}, map[string]int64{}, map[string]time.Time{}
}

// observe takes in the locks of a sample taken at now and returns them
// as the console shows them. It infers, from the change since the last
// sample:
//   - acquisitions: each owner (or permit) holding a lock that did not
//     at the last sample; a lock whose holders are the same but whose
//     fencing token changed counts one. Holds that begin and end between
//     two samples are not seen, unless fenced and the lock is held again.
//   - waits: each fair-queue waiter that has left the queue waited from
//     the sample that first saw it to this one. Mutex and read-write
//     waiters are only a subscriber count in Redis, and not seen.
//
// Nothing is inferred from the first sample: what it shows began before.
func (h *uiHistory) observe(now time.Time, locks []lockState) []uiLock {
	if h.samples == 0 {
		h.first = now
	}
	holds, tokens, queued := map[string]time.Time{}, map[string]int64{}, map[string]time.Time{}
	rows := make([]uiLock, len(locks))
	for i, st := range locks {
		n := h.holders(now, st, holds)
		if st.Token != nil {
			tokens[st.Name] = *st.Token
			if old, ok := h.tokens[st.Name]; ok && old != *st.Token && n == 0 {
				n = 1
			}
		}
		if n > 0 && h.samples > 0 {
			h.acqs = append(h.acqs, uiEvent{now, st.Name, n})
		}
		for _, w := range st.Queue {
			k := st.Name + "\x00" + w.Owner
			queued[k] = now
			if t, ok := h.queued[k]; ok {
				queued[k] = t
			}
		}
		rows[i] = h.row(now, st, holds)
	}
	for k, t := range h.queued {
		if _, ok := queued[k]; !ok && !t.Equal(h.first) {
			name, _, _ := strings.Cut(k, "\x00")
			h.waits = append(h.waits, uiEvent{now, name, now.Sub(t).Milliseconds()})
		}
	}
	h.holds, h.tokens, h.queued = holds, tokens, queued
	h.samples++
	h.acqs, h.waits = trimEvents(h.acqs, now), trimEvents(h.waits, now)
	return rows
}

// holders records in holds since when each holder (or permit) of st is
// seen, and returns how many are new since the last sample.
func (h *uiHistory) holders(now time.Time, st lockState, holds map[string]time.Time) int64 {
	var keys []string
	for _, hd := range st.Holders {
		keys = append(keys, st.Name+"\x00"+hd.Owner)
	}
	if st.Semaphore != nil {
		for _, p := range st.Semaphore.Permits {
			keys = append(keys, st.Name+"\x00"+p.ID)
		}
	}
	var n int64
	for _, k := range keys {
		if t, ok := h.holds[k]; ok {
			holds[k] = t
		} else if _, dup := holds[k]; !dup {
			holds[k] = now
			n++
		}
	}
	return n
}

// row is st as the console shows it: with top's waiters and holds, and
// how long its first holder has been seen holding it.
func (h *uiHistory) row(now time.Time, st lockState, holds map[string]time.Time) uiLock {
	r := uiLock{topLock: topLock{lockState: st, Waiters: st.waiting()}}
	for _, hd := range st.Holders {
		r.Holds += hd.Holds
	}
	if len(st.Holders) > 0 {
		since := holds[st.Name+"\x00"+st.Holders[0].Owner]
		ms := now.Sub(since).Milliseconds()
		r.HeldForMS, r.HeldBeforeStart = &ms, since.Equal(h.first)
	}
	return r
}

// trimEvents drops the events older than histWindow, and the oldest
// beyond histMaxEvents.
func trimEvents(evs []uiEvent, now time.Time) []uiEvent {
	cut, _ := slices.BinarySearchFunc(evs, now.Add(-histWindow), func(e uiEvent, t time.Time) int { return e.at.Compare(t) })
	cut = max(cut, len(evs)-histMaxEvents)
	if cut > 0 {
		evs = slices.Delete(evs, 0, cut)
	}
	return evs
}

// uiSeries is the charts' data for one name prefix: per histBucket over
// histWindow, oldest first, acquisitions per second and the wait-time
// percentiles in milliseconds (NaN where no wait ended).
type uiSeries struct {
	Acqs          []float64
	P50, P90, P99 []float64
	Total, Waits  int64 // acquisitions and waits over the window
}

// series buckets the events of locks whose name starts with prefix.
func (h *uiHistory) series(now time.Time, prefix string) uiSeries {
	n := int(histWindow / histBucket)
	s := uiSeries{Acqs: make([]float64, n), P50: nanSlice(n), P90: nanSlice(n), P99: nanSlice(n)}
	start := now.Add(-histWindow)
	bucket := func(t time.Time) int { return min(int(t.Sub(start)/histBucket), n-1) }
	for _, e := range h.acqs {
		if t := e.at; t.After(start) && strings.HasPrefix(e.name, prefix) {
			s.Acqs[bucket(t)] += float64(e.n)
			s.Total += e.n
		}
	}
	for i := range s.Acqs {
		s.Acqs[i] /= histBucket.Seconds()
	}
	waits := make([][]int64, n)
	for _, e := range h.waits {
		if e.at.After(start) && strings.HasPrefix(e.name, prefix) {
			waits[bucket(e.at)] = append(waits[bucket(e.at)], e.n)
			s.Waits++
		}
	}
	for i, w := range waits {
		s.P50[i], s.P90[i], s.P99[i] = percentile(w, 50), percentile(w, 90), percentile(w, 99)
	}
	return s
}

// percentile is the nearest-rank p-th percentile of ws, NaN for none.
func percentile(ws []int64, p int) float64 {
	if len(ws) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(ws))
	rank := (p*len(s) + 99) / 100
	return float64(s[max(rank, 1)-1])
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}
