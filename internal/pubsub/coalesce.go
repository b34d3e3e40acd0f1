package pubsub

import (
	"context"
	"sync"
)

// Coalesce returns a function that runs f with one run at a time: a call
// made while a run is in progress starts none of its own, but waits for
// that run to end (or for its own ctx) and returns. A run uses the ctx of
// the call that started it. Many channels dropped at once thus reload a
// routing table once, not once each.
func Coalesce(f func(ctx context.Context)) func(ctx context.Context) {
	var (
		mu      sync.Mutex
		running chan struct{} // closed when the run in progress ends
	)
	return func(ctx context.Context) {
		mu.Lock()
		if done := running; done != nil {
			mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
			}
			return
		}
		done := make(chan struct{})
		running = done
		mu.Unlock()
		defer func() {
			mu.Lock()
			running = nil
			mu.Unlock()
			close(done)
		}()
		f(ctx)
	}
}
