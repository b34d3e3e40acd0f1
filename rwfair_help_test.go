package dlock

import (
	"sync"
	"testing"
	"time"
)

// awaitGroup waits for wg, failing the test if its goroutines have not
// all finished within timeout: a test waits for nothing without a bound.
// (Goroutines still running then end when the test's Clients are closed.)
func awaitGroup(t testing.TB, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	recv(t, done, timeout, what)
}
