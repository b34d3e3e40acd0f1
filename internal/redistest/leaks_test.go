package redistest_test

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestCheckGoroutinesReportsLeak(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	go leakyWorker(stop)
	err := redistest.CheckGoroutines()
	close(stop)
	if err == nil || !strings.Contains(err.Error(), "leakyWorker") {
		t.Fatalf("CheckGoroutines() = %v, want it to report leakyWorker", err)
	}
}

func leakyWorker(stop <-chan struct{}) { <-stop }
