package verify

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlock-go/dlock/internal/history"
)

// hold appends one client's acquire (invoked at call, granted at ok) and
// release (stopped believing at stop, Unlock returned at ret).
func hold(evs []Event, client int, mode string, call, ok, stop, ret int64) []Event {
	return append(evs,
		Event{Client: client, Op: "acquire", Mode: mode, Kind: "invoke", Mono: call},
		Event{Client: client, Op: "acquire", Mode: mode, Kind: "ok", Mono: ok},
		Event{Client: client, Op: "release", Mode: mode, Kind: "invoke", Mono: stop},
		Event{Client: client, Op: "release", Mode: mode, Kind: "ok", Mono: ret},
	)
}

func verdict(t *testing.T, workload string, evs []Event) (porcupine.CheckResult, int) {
	t.Helper()
	ops, holds := Operations(evs)
	double, _ := DoubleGrants(workload, holds)
	return Linearizable(ModelFor(workload), ops, 10*time.Second), double
}

// TestCheckersOnSyntheticHistories: each model accepts a history that
// respects it and rejects one that breaks it (two acquisitions that
// overlap), and the interval count agrees.
func TestCheckersOnSyntheticHistories(t *testing.T) {
	var mutexOK, mutexBad, waitedOut []Event
	// Client 1 holds [10, 20], client 2 waits from 5 and holds [25, 30].
	mutexOK = hold(mutexOK, 1, "", 0, 10, 20, 22)
	mutexOK = hold(mutexOK, 2, "", 5, 25, 30, 31)
	// Client 2 is granted at 15, while client 1 still believes it holds.
	mutexBad = hold(mutexBad, 1, "", 0, 10, 20, 22)
	mutexBad = hold(mutexBad, 2, "", 5, 15, 30, 31)
	// Client 2's grant returns at 21, after client 1 stopped believing
	// (20) but before its Unlock returned (22): the release took effect
	// in between, linearizable.
	waitedOut = hold(waitedOut, 1, "", 0, 10, 20, 22)
	waitedOut = hold(waitedOut, 2, "", 5, 21, 30, 31)
	// A failed acquire is left out.
	waitedOut = append(waitedOut,
		Event{Client: 3, Op: "acquire", Kind: "invoke", Mono: 1},
		Event{Client: 3, Op: "acquire", Kind: "fail", Mono: 40})

	var rwOK, rwBad, semOK, semBad []Event
	rwOK = hold(rwOK, 1, "read", 0, 10, 20, 21)
	rwOK = hold(rwOK, 2, "read", 0, 12, 18, 19) // readers share
	rwOK = hold(rwOK, 3, "write", 0, 22, 30, 31)
	rwBad = hold(rwBad, 1, "read", 0, 10, 20, 21)
	rwBad = hold(rwBad, 3, "write", 0, 15, 30, 31) // a writer among readers
	semOK = hold(semOK, 1, "permit", 0, 10, 20, 21)
	semOK = hold(semOK, 2, "permit", 0, 11, 20, 21) // two permits
	semOK = hold(semOK, 3, "permit", 0, 22, 30, 31)
	semBad = hold(semBad, 1, "permit", 0, 10, 20, 21)
	semBad = hold(semBad, 2, "permit", 0, 11, 20, 21)
	semBad = hold(semBad, 3, "permit", 0, 12, 30, 31) // a third of two

	for _, c := range []struct {
		name, workload string
		evs            []Event
		want           porcupine.CheckResult
		double         int
	}{
		{"mutex ok", WorkMutex, mutexOK, porcupine.Ok, 0},
		{"mutex overlap", WorkMutex, mutexBad, porcupine.Illegal, 1},
		{"mutex grant during Unlock", WorkMutex, waitedOut, porcupine.Ok, 0},
		{"rw ok", WorkRW, rwOK, porcupine.Ok, 0},
		{"rw writer among readers", WorkRW, rwBad, porcupine.Illegal, 1},
		{"semaphore ok", WorkSem, semOK, porcupine.Ok, 0},
		{"semaphore over its permits", WorkSem, semBad, porcupine.Illegal, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, double := verdict(t, c.workload, c.evs)
			if got != c.want || double != c.double {
				t.Errorf("verdict %s with %d double grants, want %s with %d", got, double, c.want, c.double)
			}
		})
	}
}

// TestUnreleasedHoldIsOpen: a holder that never released (killed) blocks
// the lock to the end of the history, so a later grant to another client
// is a double grant.
func TestUnreleasedHoldIsOpen(t *testing.T) {
	evs := []Event{
		{Client: 1, Op: "acquire", Kind: "invoke", Mono: 0},
		{Client: 1, Op: "acquire", Kind: "ok", Mono: 10},
	}
	evs = hold(evs, 2, "", 5, 30, 40, 41)
	if got, double := verdict(t, WorkMutex, evs); got != porcupine.Illegal || double != 1 {
		t.Errorf("verdict %s with %d double grants, want Illegal with 1", got, double)
	}
}

// randomHistory is a mutex history of n holds by clients in turn, each
// waiting while others hold; with overlap set, one grant in a hundred
// comes while the previous holder still believes it holds.
func randomHistory(n, clients int, overlap bool) ([]Event, []history.Hold) {
	r := rand.New(rand.NewPCG(1, 2))
	var evs []Event
	var holds []history.Hold
	var t int64 = 1000
	for i := range n {
		c := i % clients
		call := t - int64(r.IntN(500)) // waited while others held
		ok := t + int64(r.IntN(10))
		if overlap && i%100 == 50 {
			ok = t - 30 // granted before the last holder let go
		}
		stop := ok + 20 + int64(r.IntN(20))
		ret := stop + int64(r.IntN(5))
		evs = hold(evs, c, "", call, ok, stop, ret)
		holds = append(holds, history.Hold{Owner: fmt.Sprint(c), Acquired: ok, Released: stop})
		t = stop + 1 + int64(r.IntN(10))
	}
	return evs, holds
}

// TestPorcupineAgainstIntervals compares porcupine with internal/history's
// interval check on 20,000-hold histories: they agree, and the timings
// are logged (docs/analysis.md quotes them).
func TestPorcupineAgainstIntervals(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for _, overlap := range []bool{false, true} {
		evs, holds := randomHistory(n, 8, overlap)
		start := time.Now()
		ops, _ := Operations(evs)
		got := Linearizable(MutexModel, ops, time.Minute)
		pTook := time.Since(start)
		start = time.Now()
		v := history.Check(holds)
		iTook := time.Since(start)
		t.Logf("%d holds, overlap %v: porcupine %s in %v, intervals %d violations in %v", n, overlap, got, pTook, len(v), iTook)
		if want := map[bool]porcupine.CheckResult{false: porcupine.Ok, true: porcupine.Illegal}[overlap]; got != want {
			t.Errorf("porcupine: %s, want %s", got, want)
		}
		if (len(v) > 0) != overlap {
			t.Errorf("intervals: %d violations, overlap %v", len(v), overlap)
		}
	}
}

// TestLongestConflict: the longest stretch counts only the time in which
// conflicting holds were open together.
func TestLongestConflict(t *testing.T) {
	var mutex, sem []Event
	mutex = hold(mutex, 1, "", 0, 10, 20, 22)
	mutex = hold(mutex, 2, "", 5, 15, 30, 31) // 5 with client 1
	mutex = hold(mutex, 3, "", 5, 40, 60, 61)
	mutex = hold(mutex, 1, "", 50, 52, 59, 60) // 7 with client 3
	sem = hold(sem, 1, "permit", 0, 10, 600, 601)
	sem = hold(sem, 2, "permit", 0, 20, 100, 101)
	sem = hold(sem, 3, "permit", 0, 90, 95, 96) // a third for 5
	for _, c := range []struct {
		workload string
		evs      []Event
		count    int
		longest  time.Duration
	}{{WorkMutex, mutex, 2, 7}, {WorkSem, sem, 1, 5}} {
		_, holds := Operations(c.evs)
		if n, l := DoubleGrants(c.workload, holds); n != c.count || l != c.longest {
			t.Errorf("%s: %d double grants, longest %d; want %d, %d", c.workload, n, l, c.count, c.longest)
		}
	}
}

// TestMaxUnavailable: the longest stretch without a success while some
// client tries, between two successes, from the first attempt, and from
// the last success to a failed attempt when the lock stays unavailable to
// the end.
func TestMaxUnavailable(t *testing.T) {
	var between, first, tail []Event
	between = hold(between, 1, "", 0, 1, 2, 3)
	between = hold(between, 2, "", 1, 9, 10, 11) // 8 without a success
	first = hold(first, 1, "", 0, 12, 13, 14)    // 12 from the first attempt
	first = hold(first, 2, "", 1, 15, 16, 17)
	tail = hold(tail, 1, "", 0, 1, 2, 3)
	tail = hold(tail, 2, "", 1, 4, 5, 6)
	tail = append(tail, // then nobody gets the lock: 26 after the last success
		Event{Client: 1, Op: "acquire", Kind: "invoke", Mono: 5},
		Event{Client: 1, Op: "acquire", Kind: "fail", Mono: 20},
		Event{Client: 1, Op: "acquire", Kind: "invoke", Mono: 21},
		Event{Client: 2, Op: "acquire", Kind: "invoke", Mono: 7},
		Event{Client: 2, Op: "acquire", Kind: "fail", Mono: 30})
	for _, c := range []struct {
		name string
		evs  []Event
		want time.Duration
	}{{"between", between, 8}, {"first", first, 12}, {"tail", tail, 26}} {
		if got := MaxUnavailable(c.evs); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
