package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// timeline prints the demo's events as they happen, one line each:
// seconds since the start, who, what. It is safe for concurrent use.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newTimeline(w io.Writer) *timeline {
	return &timeline{w: w, start: time.Now()}
}

// event prints one event of who.
func (tl *timeline) event(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, "  %6.2fs  %-11s %s\n", time.Since(tl.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// section starts scene n.
func (tl *timeline) section(n int, title, explain string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, "\n== %d. %s\n", n, title)
	for _, line := range strings.Split(explain, "\n") {
		fmt.Fprintf(tl.w, "   %s\n", line)
	}
}

// say prints a line of commentary.
func (tl *timeline) say(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, format+"\n", args...)
}
