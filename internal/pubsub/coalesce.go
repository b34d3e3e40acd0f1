package pubsub

import (
	"context"
	"sync"
	"time"
)

// ReloadLimit bounds one reload of a routing table (Router.Refresh).
const ReloadLimit = 2 * time.Second

// Reload runs one reload of a routing table, f, on a goroutine of its
// own with ctx bounded by ReloadLimit, and waits for it until ctx ends; it
// reports whether f returned. Redis clients keep a ctx's deadline but not
// always its cancellation: rueidis does not while it opens a connection
// (its handshake), go-redis without ContextTimeoutEnabled not once a read
// started (only its ReadTimeout ends that). A caller that leaves, such as
// a hub closing, thus does not wait for a node that stopped answering;
// f goes on until its client gives up and must apply its result itself.
func Reload(ctx context.Context, f func(ctx context.Context)) (returned bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bounded, cancel := context.WithTimeout(ctx, ReloadLimit)
		defer cancel()
		f(bounded)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

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
