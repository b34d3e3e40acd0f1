package pubsub

import (
	"context"
	"testing"
	"time"
)

// TestReloadReportsWhatHappened: a reload that returned is reported as
// returned, however fast, with its ctx bounded by ReloadLimit; a caller
// whose ctx is cancelled leaves while the reload goes on, and the reload
// then sees its ctx cancelled.
func TestReloadReportsWhatHappened(t *testing.T) {
	for i := range 1000 {
		var deadline time.Time
		if !Reload(context.Background(), func(ctx context.Context) { deadline, _ = ctx.Deadline() }) {
			t.Fatalf("reload %d returned but Reload says it did not", i)
		}
		if left := time.Until(deadline); left <= 0 || left > ReloadLimit {
			t.Fatalf("reload %d had %v left, want at most %v", i, left, ReloadLimit)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	release, ended := make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(release)
		cancel()
	}()
	if Reload(ctx, func(ctx context.Context) {
		<-release
		<-ctx.Done()
		ended <- ctx.Err()
	}) {
		t.Fatal("Reload waited for a reload its caller left")
	}
	if err := <-ended; err == nil {
		t.Fatal("the reload's ctx was not cancelled with its caller's")
	}
}
