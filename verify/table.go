package verify

// The table: one line per run, as `make verify` prints it and
// docs/analysis.md publishes it.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Table formats results as a Markdown table.
func Table(results []Result) string {
	var b strings.Builder
	b.WriteString("| scenario | acquisitions | double grants (longest) | linearizable | lost updates | stale writes attempted / accepted | max unavailability | faults injected | notes |\n")
	b.WriteString("|---|---:|---:|---|---:|---:|---:|---:|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %d (%v) | %s | %d / %d | %d / %d | %v | %d | %s |\n",
			r.Name(), r.Acquisitions, r.DoubleGrants, round(r.LongestOverlap), verdictWord(r),
			r.LostUpdates, r.Increments, r.StaleAttempted, r.StaleAccepted,
			round(r.MaxUnavailable), r.Faults, notes(r))
	}
	return b.String()
}

func verdictWord(r Result) string {
	switch r.Verdict {
	case "Ok":
		return "yes"
	case "Illegal":
		return "**no**"
	case "":
		return "not checked"
	}
	return "unknown (checker timed out)"
}

// notes summarises a run's notes ("failover" ×3 → "3 failovers") and its
// acquire errors.
func notes(r Result) string {
	var out []string
	counts := map[string]int{}
	for _, n := range r.Notes {
		counts[n]++
	}
	for _, n := range slices.Sorted(maps.Keys(counts)) {
		if counts[n] == 1 {
			out = append(out, n)
		} else {
			out = append(out, fmt.Sprintf("%s ×%d", n, counts[n]))
		}
	}
	if r.EqualTokens > 0 {
		out = append(out, fmt.Sprintf("%d stale writes with an equal token", r.EqualTokens))
	}
	if r.AcquireErrors > 0 {
		out = append(out, fmt.Sprintf("%d acquire errors", r.AcquireErrors))
	}
	if r.Err != "" {
		out = append(out, "run failed: "+r.Err)
	}
	return strings.Join(out, "; ")
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
