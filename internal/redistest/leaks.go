package redistest

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"time"
)

// leakTimeout is how long CheckGoroutines waits for goroutines to end.
const leakTimeout = 5 * time.Second

var (
	// leakMarkers are the stack substrings that make a goroutine suspect.
	leakMarkers = []string{"github.com/dlock-go/dlock", "github.com/redis/go-redis"}
	// testingMarkers identify the testing package's own goroutines: the
	// main one running TestMain and those running tests.
	testingMarkers = []string{"testing.(*M).", "testing.tRunner("}
)

// CheckGoroutines reports goroutines of this module or of go-redis that are
// still running, such as a lock's watchdog, an unclosed client's pool or a
// server's exit watcher. Call it in TestMain after m.Run:
//
//	code := m.Run()
//	if err := redistest.CheckGoroutines(); err != nil && code == 0 {
//		fmt.Fprintln(os.Stderr, err)
//		code = 1
//	}
//	os.Exit(code)
//
// Goroutines may need a moment to notice that they were stopped, so it
// waits up to 5s for them to end. The error lists the stacks of those left.
// The calling goroutine is never reported.
func CheckGoroutines() error {
	deadline := time.Now().Add(leakTimeout)
	for {
		leaks := leakedGoroutines()
		if len(leaks) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %d goroutine(s) still running after the tests:\n\n%s",
				len(leaks), strings.Join(leaks, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leakedGoroutines returns the stacks that mention one of leakMarkers,
// leaving out the caller's and the testing package's goroutines.
func leakedGoroutines() []string {
	var leaks []string
	// The first stack is the calling goroutine's.
	for _, g := range allStacks()[1:] {
		if containsAny(g, leakMarkers) && !containsAny(g, testingMarkers) {
			leaks = append(leaks, g)
		}
	}
	return leaks
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// GoroutinesIn counts the goroutines whose stack has a frame of function,
// as runtime.Stack prints it ("pkg.(*T).name(", with the parenthesis).
func GoroutinesIn(function string) int {
	n := 0
	for _, g := range allStacks() {
		if strings.Contains(g, function) {
			n++
		}
	}
	return n
}

// allStacks returns the stack of every goroutine, the caller's first, as
// printed by runtime.Stack: a "goroutine N [state]:" line and the frames.
func allStacks() []string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var stacks []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if g := strings.TrimSpace(string(g)); g != "" {
			stacks = append(stacks, g)
		}
	}
	return stacks
}
