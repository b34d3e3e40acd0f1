// Package history records lock histories from several OS processes and
// checks them for mutual exclusion and fencing-token order.
//
// Each worker records, for every hold, the moment Lock returned and the
// moment it was about to call Unlock, on CLOCK_MONOTONIC, which is one
// clock for every process on a Linux host. The recorded interval lies
// inside the time the worker believed it held the lock, so two recorded
// intervals of different owners that overlap are two holders at once: the
// check has no false positives.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Hold is one acquisition as a worker saw it.
type Hold struct {
	Owner    string `json:"owner"`
	Token    int64  `json:"token,omitempty"` // fencing token, 0 when not fenced
	Acquired int64  `json:"acquired"`        // CLOCK_MONOTONIC ns when Lock returned
	Released int64  `json:"released"`        // CLOCK_MONOTONIC ns before Unlock was called
	Wait     int64  `json:"wait"`            // ns spent in Lock
	Lost     bool   `json:"lost,omitempty"`  // Unlock found the lock gone

	// The hold's fenced write to the protected resource, if it made one:
	// CLOCK_MONOTONIC ns before it was sent and after its reply, and
	// whether the resource accepted it.
	WriteStart int64 `json:"write_start,omitempty"`
	WriteEnd   int64 `json:"write_end,omitempty"`
	Accepted   bool  `json:"accepted,omitempty"`
}

// Now reads CLOCK_MONOTONIC in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock id
	}
	return ts.Nano()
}

// Recorder appends holds to a JSON-lines file. It is safe for concurrent use.
type Recorder struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// Create opens path for recording.
func Create(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, w: bufio.NewWriter(f)}, nil
}

// Add records one hold.
func (r *Recorder) Add(h Hold) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err = r.w.Write(append(b, '\n'))
	return err
}

// Close flushes and closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil {
		return err
	}
	return r.f.Close()
}

// Read loads the holds recorded in the given files.
func Read(paths ...string) ([]Hold, error) { return ReadLines[Hold](paths...) }

// ReadLines loads the values of the given files, one JSON value a line,
// in order: the format of the holds here and of verify/'s events.
func ReadLines[T any](paths ...string) ([]T, error) {
	var vs []T
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var v T
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			vs = append(vs, v)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// Violation is one breach of mutual exclusion or of fencing order.
type Violation struct {
	A, B   Hold
	Reason string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s [%d, %d] token %d vs %s [%d, %d] token %d",
		v.Reason, v.A.Owner, v.A.Acquired, v.A.Released, v.A.Token, v.B.Owner, v.B.Acquired, v.B.Released, v.B.Token)
}

// Check returns every pair of holds by different owners whose intervals
// overlap, and every hold whose fencing token is not higher than the token
// of an earlier hold by another owner (when tokens are recorded).
func Check(holds []Hold) []Violation {
	hs := slices.Clone(holds)
	slices.SortFunc(hs, func(a, b Hold) int { return cmpInt(a.Acquired, b.Acquired) })
	var out []Violation
	// Overlaps: compare each hold with the open holds before it.
	var open []Hold
	for _, h := range hs {
		keep := open[:0]
		for _, o := range open {
			if o.Released > h.Acquired {
				keep = append(keep, o)
				if o.Owner != h.Owner {
					out = append(out, Violation{o, h, "overlap"})
				}
			}
		}
		open = append(keep, h)
	}
	// Tokens: across owners, in acquisition order, strictly increasing.
	var last Hold
	for _, h := range hs {
		if h.Token == 0 {
			continue
		}
		if last.Token != 0 && last.Owner != h.Owner && h.Token <= last.Token {
			out = append(out, Violation{last, h, "token not increasing"})
		}
		if h.Token > last.Token {
			last = h
		}
	}
	return out
}

// StaleWrites counts the stale fenced writes among holds: writes sent
// after another hold's write with a token at least as high (an older
// holder's, or one that reused a token) had been accepted. A resource
// that checks tokens must refuse every one: accepted counts those it let
// through, which must be none.
func StaleWrites(holds []Hold) (attempted, accepted int) {
	var done []Hold // accepted writes, by the time their reply came
	for _, h := range holds {
		if h.Accepted {
			done = append(done, h)
		}
	}
	slices.SortFunc(done, func(a, b Hold) int { return cmpInt(a.WriteEnd, b.WriteEnd) })
	// highest[i] is the highest token among done[:i+1].
	highest := make([]int64, len(done))
	for i, h := range done {
		highest[i] = h.Token
		if i > 0 {
			highest[i] = max(highest[i], highest[i-1])
		}
	}
	for _, h := range holds {
		if h.WriteStart == 0 {
			continue
		}
		// The accepted writes whose reply came before h's was sent.
		n, _ := slices.BinarySearchFunc(done, h.WriteStart, func(d Hold, t int64) int { return cmpInt(d.WriteEnd, t) })
		if n > 0 && highest[n-1] >= h.Token {
			attempted++
			if h.Accepted {
				accepted++
			}
		}
	}
	return attempted, accepted
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
