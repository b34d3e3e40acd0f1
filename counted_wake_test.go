package dlock

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests of this file check that a wake-up a message gives a counting
// waiter (a permit's) is never lost: a waiter that took its permit and
// ends passes on a wake-up that came meanwhile, for the permit that
// message says is free.

// heldOK is a go-redis hook on the script calls whose first key is key:
// it sends the time of each reply on replies (as scriptReplies does), and,
// once armed, holds the first successful acquire ("OK") back from its
// caller until unblock is closed, after telling entered.
type heldOK struct {
	key     string
	armed   atomic.Bool
	entered chan struct{}
	unblock chan struct{}
	replies chan time.Time
}

func (h *heldOK) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldOK) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(cmd, err)
		return err
	}
}

func (h *heldOK) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.note(cmd, cmd.Err())
		}
		return err
	}
}

func (h *heldOK) note(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if name := strings.ToLower(cmd.Name()); name != "evalsha" && name != "eval" || len(args) < 4 || args[3] != h.key || err != nil && err != redis.Nil {
		return
	}
	if c, ok := cmd.(*redis.Cmd); ok {
		if v, _ := c.Text(); v == "OK" && h.armed.CompareAndSwap(true, false) {
			close(h.entered)
			select {
			case <-h.unblock:
			case <-time.After(10 * time.Second): // the test failed: let it end
			}
		}
	}
	select {
	case h.replies <- time.Now():
	default:
	}
}

// TestPermitCountedWakePassedOn: a permit freed while the waiter woken for
// the previous one is between its successful attempt and its end wakes
// the Client's next waiter at once. The release's message "1" lands in
// the first waiter's wake-up buffer (it is first in line and took its
// last wake-up); ending, that waiter must pass it on rather than drop it,
// or the next waiter sleeps to its poll while a permit is free.
func TestPermitCountedWakePassedOn(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	hook := &heldOK{key: name, entered: make(chan struct{}), unblock: make(chan struct{}), replies: make(chan time.Time, 1024)}
	t.Cleanup(func() {
		select {
		case <-hook.unblock:
		default:
			close(hook.unblock)
		}
	})
	rdb := newRedis(t)
	rdb.AddHook(hook)
	a := mustPermitSemaphore(t, newClient(t, rdb), name)
	b := mustPermitSemaphore(t, newClient(t, nil), name)
	if ok, err := b.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p1, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}

	type acquired struct {
		at  time.Time
		err error
	}
	got := [2]chan acquired{make(chan acquired, 1), make(chan acquired, 1)}
	acquire := func(i int) {
		_, err := a.Acquire(ctx)
		got[i] <- acquired{time.Now(), err}
	}
	// The first waiter tries, subscribes and tries again; the second
	// joins its subscription (or its place in the Client's queue): both
	// then sleep, the first waiter first in the hub's line.
	go acquire(0)
	recv(t, hook.replies, 10*time.Second, "the first waiter's first try")
	recv(t, hook.replies, 10*time.Second, "the first waiter's try once subscribed")
	go acquire(1)
	waitForSyncWaiters(t, a.c, a.channel, 2)
	// A listener of the same hub sees each message once the hub has
	// dispatched it (Messages takes the hub's lock that dispatch holds).
	l, err := a.c.hub.Listen(ctx, a.channel)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(true)
	recv(t, l.Ready(), 10*time.Second, "the listener's subscription")
	dispatched := func(what string) {
		recv(t, l.Wake(), 10*time.Second, what)
		l.Messages()
	}

	hook.armed.Store(true)
	if err := b.Release(p1); err != nil { // "1": wakes the first waiter
		t.Fatal(err)
	}
	recv(t, hook.entered, 10*time.Second, "the first waiter's successful attempt")
	dispatched("the message of the first release")
	// While the first waiter is held, every try is the second waiter's:
	// measure from its next poll, after which it sleeps syncPoll.
	for drained := false; !drained; {
		select {
		case <-hook.replies:
		default:
			drained = true
		}
	}
	slept := recv(t, hook.replies, 10*time.Second, "the second waiter's poll")
	if err := b.Release(p2); err != nil { // "1": the first waiter's buffer
		t.Fatal(err)
	}
	dispatched("the message of the second release")
	close(hook.unblock)
	var second time.Time
	for i, what := range []string{"the first waiter", "the second waiter"} {
		r := recv(t, got[i], 10*time.Second, what+"'s Acquire")
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		second = r.at
	}
	d := second.Sub(slept)
	t.Logf("the second waiter acquired %v after its last try", d)
	if d >= wakeBound {
		t.Errorf("the second waiter acquired %v after its last try (a permit freed meanwhile): woken by its %v poll; the release's wake-up was dropped", d, syncPoll)
	}
}
