package main

import (
	"math"
	"strings"
	"testing"
)

// TestSplice: only the text between the markers is replaced; a file
// without markers becomes a new one.
func TestSplice(t *testing.T) {
	old := "# B\n\nintro\n\n" + genStart + "\nold tables\n" + genEnd + "\n\n## Analysis\n\nhand-written\n"
	got := splice(old, "new tables\n")
	want := "# B\n\nintro\n\n" + genStart + "\nnew tables\n" + genEnd + "\n\n## Analysis\n\nhand-written\n"
	if got != want {
		t.Fatalf("splice:\n%s\nwant:\n%s", got, want)
	}
	if got := splice("no markers", "tables\n"); strings.Contains(got, "no markers") || !strings.Contains(got, genStart+"\ntables\n"+genEnd) {
		t.Fatalf("splice without markers:\n%s", got)
	}
}

// TestCompare: each measure is compared with the best peer in its own
// direction, and an unmeasured peer is skipped.
func TestCompare(t *testing.T) {
	ids := []string{"dlock", "redsync", "rueidislock", "redislock-1ms"}
	rate := []float64{300, 100, 200, math.NaN()}
	p99 := []float64{10, 5, 20, 8}
	got := compare(ids, []metric{
		{"rate", false, func(i int) float64 { return rate[i] }, f2},
		{"p99", true, func(i int) float64 { return p99[i] }, f2},
	})
	for _, want := range []string{
		"| rate | 200.00 (rueidislock) | 300.00 | 1.50× |",
		"| p99 | 5.00 (redsync) | 10.00 | 2.00× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("compare lacks %q:\n%s", want, got)
		}
	}
}
