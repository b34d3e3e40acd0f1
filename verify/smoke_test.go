package verify

import (
	"context"
	"testing"
)

// TestSmoke runs the short matrix (Smoke) and checks that every negative
// control is caught and that the correct clients' runs keep what dlock
// promises there: no counter increment lost when a lease runs out under a
// slow holder, no stale write accepted by the fenced register when a
// holder is frozen past its lease, and every fault injected. The Sentinel
// partition is reported, not judged: asynchronous replication lets two
// holders in (docs/analysis.md).
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("the smoke of make verify takes about two minutes")
	}
	needRoot(t)
	results := RunAll(context.Background(), Smoke(), t.TempDir(), func(r Result) {
		t.Logf("%s", Table([]Result{r}))
	})
	t.Logf("\n%s", Table(results))
	for _, r := range results {
		if r.Err != "" {
			t.Errorf("%s: %s", r.Name(), r.Err)
			continue
		}
		if !r.ControlCaught() {
			t.Errorf("%s: the negative control was not caught: %+v", r.Name(), r)
		}
		if r.Fault != FaultNone && r.Fault != FaultOverrun && r.Faults == 0 {
			t.Errorf("%s: no fault was injected", r.Name())
		}
		if r.Acquisitions == 0 {
			t.Errorf("%s: no acquisition", r.Name())
		}
		if r.Broken != BrokenNone || r.Topo != TopoSingle {
			continue
		}
		if r.Fault == FaultOverrun && r.LostUpdates > 0 {
			t.Errorf("%s: %d counter increments lost by a client that honours its lock context", r.Name(), r.LostUpdates)
		}
		if r.StaleAccepted > 0 {
			t.Errorf("%s: the fenced register accepted %d stale writes", r.Name(), r.StaleAccepted)
		}
	}
}
