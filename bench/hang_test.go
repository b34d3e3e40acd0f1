package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// hangLib is a library whose Lock never returns. It is registered in
// init, so that the tests' worker processes (the test binary itself,
// TestMain) know it too.
const hangLib = "test-hang"

func init() {
	libs = append(libs, lib{
		id:       hangLib,
		settings: "a Lock that never returns (tests only)",
		open:     func(string, time.Duration) (locker, error) { return hangingLocker{}, nil },
	})
}

// hangingLocker hangs as a library can: its lock ignores ctx and never
// returns.
type hangingLocker struct{}

func (hangingLocker) lock(context.Context, string) (func(context.Context) error, error) {
	// Asleep rather than blocked on a channel: with every goroutine
	// blocked the runtime would end the process with "all goroutines
	// are asleep" instead of letting it hang.
	time.Sleep(time.Hour)
	return nil, errors.New("test-hang: woke up")
}

func (hangingLocker) roundTrips() int64 { return 0 }
func (hangingLocker) close()            {}

// withScenarioLib adds the library id to scenario's libraries for the
// rest of the test.
func withScenarioLib(t *testing.T, scenario, id string) {
	t.Helper()
	i := slices.IndexFunc(scenarios, func(s struct {
		name string
		libs []string
	}) bool {
		return s.name == scenario
	})
	old := scenarios[i].libs
	scenarios[i].libs = append(slices.Clone(old), id)
	t.Cleanup(func() { scenarios[i].libs = old })
}

// TestHungWorkerRow: a hot-lock worker that gives no result within its
// bound is stopped with SIGQUIT; its row says that it hung and where its
// stacks are, the file holds the goroutine dump (the hung Lock in it),
// and the other library's row keeps its numbers.
func TestHungWorkerRow(t *testing.T) {
	cfg := quickConfig()
	cfg.hotRounds = 1
	// Well past the healthy worker's run (spawn 1 s, warm-up 0.3 s,
	// window 1 s).
	cfg.hang = hangPolicy{after: 6 * time.Second, dir: t.TempDir()}
	cfg.libs = nil
	for _, id := range []string{"redislock-1ms", hangLib} {
		l, err := libByID(id)
		if err != nil {
			t.Fatal(err)
		}
		cfg.libs = append(cfg.libs, l)
	}
	withScenarioLib(t, "hot", hangLib)

	r := &report{cfg: cfg}
	r.runAll([]string{"hot"})
	var out strings.Builder
	r.writeHot(func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }, "")
	md := out.String()
	t.Logf("\n%s", md)

	row := regexp.MustCompile(`(?m)^\| test-hang — hung: no result after 6s \(stopped with SIGQUIT; stacks in (\S+)\) \|( – \|)+$`).FindStringSubmatch(md)
	if row == nil {
		t.Fatalf("no hung row for %s", hangLib)
	}
	dump, err := os.ReadFile(row[1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dump), "SIGQUIT") || !strings.Contains(string(dump), "hangingLocker.lock") {
		t.Errorf("%s does not hold the goroutine dump with the hung Lock:\n%.2000s", row[1], dump)
	}
	if !regexp.MustCompile(`(?m)^\| redislock-1ms \| [1-9]`).MatchString(md) {
		t.Errorf("the healthy library's row has no acquisitions")
	}
}

// TestNoResultRows: every table prints the row of a library whose run
// gave no result, saying why, beside the rows of those that did.
func TestNoResultRows(t *testing.T) {
	const why = "hung: no result after 1m20s (stopped with SIGQUIT; stacks in /tmp/x.stacks)"
	cfg := defaultConfig()
	r := &report{cfg: cfg, unc: map[int][]*uncontendedResult{}}
	for _, g := range uncontendedGoroutines {
		r.unc[g] = []*uncontendedResult{{Lib: "dlock", Goroutines: g, PerSec: 100, Window: time.Second}, {Lib: "peer", Goroutines: g, Failed: why}}
	}
	r.hot = []*hotResult{{Lib: "dlock", Acq: 10, PerSec: 10}, {Lib: "peer", Failed: why}}
	for _, n := range redNodeCounts {
		for _, g := range uncontendedGoroutines {
			r.red = append(r.red,
				&redlockResult{Nodes: n, uncontendedResult: &uncontendedResult{Lib: "dlock", Goroutines: g, PerSec: 100, Window: time.Second}},
				&redlockResult{Nodes: n, uncontendedResult: &uncontendedResult{Lib: "redsync", Goroutines: g, Failed: why}})
		}
	}
	r.watchdog = []*watchdogResult{{Lib: "dlock", Window: time.Second}, {Lib: "peer", Failed: why}}
	r.waiters = []*waitersResult{{Lib: "dlock", Window: time.Second}, {Lib: "peer", Failed: why}}
	r.sem = []*semResult{{Lib: "dlock", Window: time.Second}, {Lib: "peer", Failed: why}}
	r.many = []*manyResult{{Lib: "dlock", Window: time.Second}, {Lib: "peer", Failed: why}}
	r.floor = []*floorResult{{Layout: "dlock"}, {Layout: "setnx", Failed: why}}
	md := r.markdown("")

	for _, section := range strings.Split(md, "\n## ")[1:] {
		title, _, _ := strings.Cut(section, "\n")
		for _, table := range tablesOf(section) {
			if !strings.Contains(table, " — "+why+" | – |") {
				t.Errorf("%s: a table without the failed row:\n%s", title, table)
			}
			if len(strings.Split(table, "\n")) < 4 { // head, separator, both rows
				t.Errorf("%s: a table without the other row:\n%s", title, table)
			}
		}
	}
	for _, title := range []string{"Uncontended", "Hot lock", "RedLock", "Watchdog", "Waiter scale", "Permit semaphore", "Many waiters", "Redis cost of the lock layout"} {
		if !strings.Contains(md, "\n## "+title) {
			t.Errorf("no section %q", title)
		}
	}
}

// tablesOf returns the result tables of a report section: those with a
// row per library or layout, other than the lists of configurations.
func tablesOf(section string) []string {
	var tables []string
	for _, block := range strings.Split(section, "\n\n") {
		head, _, _ := strings.Cut(block, "\n")
		first, rest, _ := strings.Cut(strings.TrimPrefix(head, "| "), " |")
		if (first == "library" || first == "layout") && !strings.HasPrefix(rest, " configuration |") {
			tables = append(tables, block)
		}
	}
	return tables
}
