package verify

// The checkers. A history is the events of every worker of a run; it is
// turned into porcupine operations (an acquire from its invocation to its
// success, a release from the moment its holder stopped believing it held
// to the return of Unlock) and checked against a model of the primitive:
// a mutex, a counting semaphore, a read-write lock. An acquire that failed
// is left out: it may have taken effect in Redis, but nobody believed it
// held, and a hold nobody believes in cannot overlap anything. The
// interval check (internal/history's shape) gives the number of double
// grants that porcupine's yes/no verdict does not.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlock-go/dlock/internal/history"
)

// ReadHistory loads the events in the given files.
func ReadHistory(paths ...string) ([]Event, error) {
	evs, err := history.ReadLines[Event](paths...)
	if err != nil {
		return nil, fmt.Errorf("dlock/verify: %w", err)
	}
	return evs, nil
}

// Input is a porcupine operation's input.
type Input struct {
	Client int
	Op     string // acquire, release
	Mode   string // "", read, write, permit
}

// Hold is one acquisition that succeeded: from Lock's return to the moment
// its holder stopped believing it held (Stop), or to the end of the
// history when it never let go.
type Hold struct {
	Client   int
	Mode     string
	Token    int64
	Acquired int64
	Stop     int64
}

// Operations turns a history into porcupine operations and holds.
// Events of one client alternate: acquire invoke, then ok (a release
// follows) or fail. A hold whose release never completed (the worker was
// killed) stays open to the end of the history.
func Operations(evs []Event) ([]porcupine.Operation, []Hold) {
	byClient := map[int][]Event{}
	var end int64
	for _, e := range evs {
		byClient[e.Client] = append(byClient[e.Client], e)
		end = max(end, e.Mono)
	}
	var ops []porcupine.Operation
	var holds []Hold
	clients := slices.Sorted(maps.Keys(byClient))
	for i, c := range clients {
		es := byClient[c]
		// A worker writes a release's invocation after its critical
		// section, stamped with the moment it stopped believing: order by
		// the file, not by the stamp.
		var call *Event
		var hold *Hold
		for j := range es {
			e := &es[j]
			switch {
			case e.Kind == "invoke":
				call = e
			case call == nil:
			case e.Op == "acquire" && e.Kind == "ok":
				ops = append(ops, op(i, call, e))
				holds = append(holds, Hold{Client: c, Mode: e.Mode, Token: e.Token, Acquired: e.Mono, Stop: end})
				hold = &holds[len(holds)-1]
				call = nil
			case e.Op == "release":
				ops = append(ops, op(i, call, e))
				if hold != nil {
					hold.Stop = call.Mono
				}
				call, hold = nil, nil
			default: // a failed acquire
				call = nil
			}
		}
		if hold != nil { // never released: believed to the end
			ops = append(ops, porcupine.Operation{ClientId: i,
				Input: Input{Client: c, Op: "release", Mode: hold.Mode}, Call: end, Return: end + 1})
		}
	}
	return ops, holds
}

func op(clientIdx int, call, ret *Event) porcupine.Operation {
	r := max(ret.Mono, call.Mono)
	return porcupine.Operation{ClientId: clientIdx, Input: Input{Client: call.Client, Op: call.Op, Mode: call.Mode},
		Call: call.Mono, Return: r}
}

// MutexModel is a mutex: at most one holder; only the holder releases.
var MutexModel = porcupine.Model{
	Init: func() any { return -1 },
	Step: func(state, input, _ any) (bool, any) {
		holder, in := state.(int), input.(Input)
		switch {
		case in.Op == "acquire" && holder == -1:
			return true, in.Client
		case in.Op == "release" && holder == in.Client:
			return true, -1
		}
		return false, state
	},
	DescribeState: func(state any) string { return fmt.Sprintf("holder %d", state) },
}

// SemaphoreModel is a counting semaphore of n permits, each held by one
// client at a time.
func SemaphoreModel(n int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return "" },
		Step: func(state, input, _ any) (bool, any) {
			held, in := decodeSet(state.(string)), input.(Input)
			switch {
			case in.Op == "acquire" && len(held) < n && !slices.Contains(held, in.Client):
				return true, encodeSet(append(held, in.Client))
			case in.Op == "release" && slices.Contains(held, in.Client):
				return true, encodeSet(slices.DeleteFunc(held, func(c int) bool { return c == in.Client }))
			}
			return false, state
		},
	}
}

// rwState is the read-write lock's state: a writer or readers.
type rwState struct {
	writer  int // -1 none
	readers string
}

// RWModel is a read-write lock: one writer and no reader, or readers and
// no writer.
var RWModel = porcupine.Model{
	Init: func() any { return rwState{writer: -1} },
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(rwState), input.(Input)
		readers := decodeSet(s.readers)
		switch {
		case in.Op == "acquire" && in.Mode == "write" && s.writer == -1 && len(readers) == 0:
			return true, rwState{writer: in.Client}
		case in.Op == "acquire" && in.Mode == "read" && s.writer == -1 && !slices.Contains(readers, in.Client):
			return true, rwState{writer: -1, readers: encodeSet(append(readers, in.Client))}
		case in.Op == "release" && in.Mode == "write" && s.writer == in.Client:
			return true, rwState{writer: -1, readers: s.readers}
		case in.Op == "release" && in.Mode == "read" && slices.Contains(readers, in.Client):
			return true, rwState{writer: -1, readers: encodeSet(slices.DeleteFunc(readers, func(c int) bool { return c == in.Client }))}
		}
		return false, state
	},
}

// A set of clients as a comparable value: sorted, comma-separated.
func encodeSet(cs []int) string {
	slices.Sort(cs)
	b := []byte{}
	for _, c := range cs {
		b = fmt.Appendf(b, "%d,", c)
	}
	return string(b)
}

func decodeSet(s string) []int {
	var out []int
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			out = append(out, n)
			n = 0
			continue
		}
		n = n*10 + int(s[i]-'0')
	}
	return out
}

// ModelFor returns the porcupine model of a workload.
func ModelFor(workload string) porcupine.Model {
	switch workload {
	case WorkRW:
		return RWModel
	case WorkSem:
		return SemaphoreModel(SemPermits)
	}
	return MutexModel
}

// Linearizable checks ops against model, giving up after timeout
// (porcupine.Unknown).
func Linearizable(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(model, ops, timeout)
}

// DoubleGrants counts the holds granted while holds they must not meet
// were open (by other clients): any for a mutex, a writer for a reader and
// anyone for a writer in a read-write lock, and for a semaphore of n
// permits, n others. longest is the longest stretch of time in which such
// holds were open together: a few microseconds of timer latency and
// seconds of split brain are both double grants, and not the same finding.
func DoubleGrants(workload string, holds []Hold) (count int, longest time.Duration) {
	hs := slices.Clone(holds)
	slices.SortFunc(hs, func(a, b Hold) int { return cmpInt64(a.Acquired, b.Acquired) })
	var open []Hold
	for _, h := range hs {
		open = slices.DeleteFunc(open, func(o Hold) bool { return o.Stop <= h.Acquired })
		if conflict(workload, append(open, h)) {
			count++
		}
		open = append(open, h)
	}
	return count, longestConflict(workload, hs)
}

// conflict says whether the holds may not be open together.
func conflict(workload string, open []Hold) bool {
	if workload == WorkSem {
		return len(open) > SemPermits
	}
	writers := 0
	for _, o := range open {
		if o.Mode != "read" {
			writers++
		}
	}
	return writers > 0 && len(open) > 1
}

// longestConflict sweeps the holds' starts and stops in time order and
// returns the longest stretch in which the open holds conflict.
func longestConflict(workload string, hs []Hold) time.Duration {
	type edge struct {
		at    int64
		start bool
		i     int
	}
	var edges []edge
	for i, h := range hs {
		edges = append(edges, edge{h.Acquired, true, i}, edge{h.Stop, false, i})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmpInt64(a.at, b.at); c != 0 {
			return c
		}
		if a.start == b.start {
			return 0
		}
		if !a.start { // a stop at the same moment as a start comes first
			return -1
		}
		return 1
	})
	open := map[int]bool{}
	var longest time.Duration
	var since int64 = -1
	for _, e := range edges {
		if e.start {
			open[e.i] = true
		} else {
			delete(open, e.i)
		}
		var now []Hold
		for i := range open {
			now = append(now, hs[i])
		}
		switch c := conflict(workload, now); {
		case c && since < 0:
			since = e.at
		case !c && since >= 0:
			longest = max(longest, time.Duration(e.at-since))
			since = -1
		}
	}
	return longest
}

// MaxUnavailable is the longest time in the history during which some
// client was trying to acquire and none succeeded: from the first
// attempt, or from a success, to the next success, or to an attempt that
// failed with none after it (a lock that stays unavailable to the end of
// the run, which the time between two successes would not show).
func MaxUnavailable(evs []Event) time.Duration {
	es := slices.Clone(evs)
	slices.SortFunc(es, func(a, b Event) int { return cmpInt64(a.Mono, b.Mono) })
	var worst int64
	since := int64(-1) // the first attempt, then the latest success
	for _, e := range es {
		switch {
		case e.Op != "acquire":
		case since < 0:
			since = e.Mono
		case e.Kind == "ok" || e.Kind == "fail":
			worst = max(worst, e.Mono-since)
			if e.Kind == "ok" {
				since = e.Mono
			}
		}
	}
	return time.Duration(worst)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
