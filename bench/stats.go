package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0–100) of sorted, nearest rank.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// summary describes a set of durations in nanoseconds.
type summary struct {
	N                   int
	P50, P99, Mean, Max int64
}

func summarize(ns []int64) summary {
	if len(ns) == 0 {
		return summary{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return summary{N: len(s), P50: percentile(s, 50), P99: percentile(s, 99), Mean: int64(sum / float64(len(s))), Max: s[len(s)-1]}
}

// fmtDur prints nanoseconds with three significant digits in a unit that
// fits: 87.3 µs, 1.42 ms, 2.10 s.
func fmtDur(ns int64) string {
	d := float64(ns)
	switch {
	case ns == 0:
		return "0"
	case d < 1e3:
		return fmt.Sprintf("%d ns", ns)
	case d < 1e6:
		return sig3(d/1e3) + " µs"
	case d < 1e9:
		return sig3(d/1e6) + " ms"
	default:
		return sig3(d/1e9) + " s"
	}
}

// sig3 prints v with three significant digits.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtRate prints a count per second.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return sig3(v/1e6) + " M"
	case v >= 1e4:
		return fmt.Sprintf("%.0f", v)
	default:
		return sig3(v)
	}
}

// ratio prints a/b as "1.23×", or "–" when b is 0.
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	r := a / b
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	default:
		return fmt.Sprintf("%.2f×", r)
	}
}

// pct prints a CPU time over a wall time as a percentage of one core.
func pct(cpu, wall time.Duration) string {
	if wall <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*float64(cpu)/float64(wall))
}

var nan = math.NaN()

// fmtBytes prints a byte count in B, kB or MB (decimal units).
func fmtBytes(n int64) string {
	v := float64(n)
	switch a := math.Abs(v); {
	case a < 1e3:
		return fmt.Sprintf("%d B", n)
	case a < 1e6:
		return sig3(v/1e3) + " kB"
	default:
		return sig3(v/1e6) + " MB"
	}
}
