package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func heldBy1(name, owner string, token int64) lockState {
	return lockState{Name: name, Locked: true, Kind: "mutex", Holders: []holder{{Owner: owner, Holds: 1}}, Token: &token}
}

func queueOf(name string, owners ...string) lockState {
	st := lockState{Name: name, Kind: "fair", Holders: []holder{}}
	for _, o := range owners {
		st.Queue = append(st.Queue, waiter{Owner: o})
	}
	return st
}

// TestUIHistoryInfers: from successive samples the console counts a new
// holder, or a new fencing token under the same holder, as an
// acquisition, and a fair waiter that left the queue as a wait from the
// sample that first saw it; nothing from the first sample, whose holds
// and waits began before it.
func TestUIHistoryInfers(t *testing.T) {
	var h uiHistory
	h.init()
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rows := h.observe(at(0), []lockState{heldBy1("a:1", "o1", 10), queueOf("q:1", "old")})
	if !rows[0].HeldBeforeStart {
		t.Error("a lock held at the first sample is not marked as held before the start")
	}
	h.observe(at(1), []lockState{heldBy1("a:1", "o2", 11), queueOf("q:1", "w1", "w2")})      // o2 takes a:1; "old" leaves unmeasured
	h.observe(at(2), []lockState{heldBy1("a:1", "o2", 12), queueOf("q:1", "w2")})            // o2 again (token); w1 waited 1s
	rows = h.observe(at(5), []lockState{heldBy1("a:1", "o2", 12), heldBy1("b:1", "o3", 13)}) // b:1 taken; w2 waited 4s
	if rows[0].HeldBeforeStart || *rows[0].HeldForMS != 4000 {
		t.Errorf("a:1 held for %v (before start %v), want 4000ms since o2 was first seen", *rows[0].HeldForMS, rows[0].HeldBeforeStart)
	}
	all := h.series(at(5), "")
	if all.Total != 3 || all.Waits != 2 {
		t.Errorf("acquisitions %d, waits %d; want 3 and 2", all.Total, all.Waits)
	}
	a := h.series(at(5), "a:")
	if a.Total != 2 || a.Waits != 0 {
		t.Errorf("prefix a: acquisitions %d, waits %d; want 2 and 0", a.Total, a.Waits)
	}
	q := h.series(at(5), "q:")
	last := len(q.P50) - 1
	if q.P50[last] != 1000 || q.P99[last] != 4000 || !math.IsNaN(q.P50[0]) {
		t.Errorf("q: p50 %v, p99 %v, want 1000 and 4000 in the last bucket", q.P50[last], q.P99[last])
	}
	if got := h.series(at(5).Add(histWindow+histBucket), ""); got.Total != 0 {
		t.Errorf("%d acquisitions after the window, want 0", got.Total)
	}
}

// TestUIDeadlockSVG: a cycle is drawn as a group with a node per owner
// and an arrow per wait, its texts escaped.
func TestUIDeadlockSVG(t *testing.T) {
	if deadlockSVG(nil) != "" {
		t.Error("no cycle drew a graph")
	}
	svg := deadlockSVG([]deadlockJSON{{Waits: []deadlockWaitJSON{
		{Owner: "o1", Lock: "<script>x", Host: "h1", PID: 1, Label: "billing"},
		{Owner: "o2", Lock: "b&c", Host: "h2", PID: 2, Program: "shipper"},
	}}})
	for _, want := range []string{`class="deadlock-cycle" data-owners="2"`, "waits for &lt;script&gt;x", "waits for b&amp;c", "billing", "h2 pid 2"} {
		if !strings.Contains(svg, want) {
			t.Errorf("graph lacks %q: %s", want, svg)
		}
	}
	if strings.Contains(svg, "<script>") || strings.Count(svg, `class="node"`) != 2 || strings.Count(svg, `class="edge"`) != 2 {
		t.Errorf("graph: %s", svg)
	}
}
