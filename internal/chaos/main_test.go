package chaos

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// soak is set by `make soak`: long runs and a summary table.
var soak = os.Getenv("DLOCK_SOAK") != ""

func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		if err := runWorker(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := m.Run()
	printSummary()
	if code == 0 {
		if err := redistest.CheckGoroutines(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// row is one scenario's line in the summary.
type row struct {
	scenario   string
	acquired   int
	violations int
	maxWait    string
	faults     int
	notes      string
}

var (
	summaryMu sync.Mutex
	summary   []row
)

func addRow(r row) {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	summary = append(summary, r)
}

func printSummary() {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	if len(summary) == 0 {
		return
	}
	var b strings.Builder
	total := 0
	fmt.Fprintf(&b, "\n| scenario | acquisitions | violations | max wait | faults injected | notes |\n|---|---:|---:|---:|---:|---|\n")
	for _, r := range summary {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d | %s |\n", r.scenario, r.acquired, r.violations, r.maxWait, r.faults, r.notes)
		total += r.acquired
	}
	fmt.Fprintf(&b, "| **total** | %d | | | | |\n", total)
	fmt.Print(b.String())
}
