package dlockrueidis_test

// What the rueidis driver does on its own, where go-redis's transport would
// do it for dlock.New: the EVAL fallback after NOSCRIPT, and subscribing
// again, with notice, after the pub/sub connection broke.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// TestNoScriptFallback: after SCRIPT FLUSH, the scripts run by EVAL and
// load again; a Lock and an Unlock work.
func TestNoScriptFallback(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c, admin := newClient(t), newRedis(t)
	m := must(c.NewMutex(testName(t)))
	for i := range 2 {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		held, err := m.Lock(ctx)
		if err != nil {
			t.Fatalf("Lock %d after SCRIPT FLUSH: %v", i, err)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(held); err != nil {
			t.Fatalf("Unlock %d after SCRIPT FLUSH: %v", i, err)
		}
	}
}

// TestResubscribeWakesWaiters: a waiter whose pub/sub connection broke is
// subscribed again on a new one, and that new subscription wakes it to try
// again, since a message may have been lost meanwhile. The lock is freed
// with a plain DEL, which publishes nothing: only the resubscription can
// wake the waiter before the lease it waits out (30 s).
func TestResubscribeWakesWaiters(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	name := testName(t)
	admin := newRedis(t)
	holder := must(newGoRedisClient(t).NewMutex(name))
	waiter := must(newClient(t).NewMutex(name))
	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var mine context.Context
	go func() {
		var err error
		mine, err = waiter.Lock(ctx)
		got <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		chs, err := admin.PubSubChannels(ctx, "*"+name+"*").Result()
		if err == nil && len(chs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter did not subscribe within 10 s (%v, %v)", chs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := admin.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, got, wakeBound, "the waiter's Lock after its pub/sub connection broke")
	if err := waiter.Unlock(mine); err != nil {
		t.Fatal(err)
	}
	_ = holder.Unlock(held) // lost to the DEL; its error does not matter here
}

// TestRunOnceErrorReplyIsNotNoReply: the rueidis driver's RunOnce, as
// the go-redis transport's, reports an error reply as Redis's error, not
// as ErrNoReply (which says the operation may have been applied): here
// WRONGTYPE, the semaphore's key being a hash.
func TestRunOnceErrorReplyIsNotNoReply(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := testName(t)
	admin := newRedis(t)
	if err := admin.HSet(ctx, name, "f", 1).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Del(context.Background(), name) })
	s := must(newClient(t).NewSemaphore(name))
	for _, op := range []struct {
		what string
		call func() error
	}{
		{"Release", func() error { return s.Release(ctx, 1) }},
		{"TryAcquire", func() error { _, err := s.TryAcquire(ctx, 1); return err }},
	} {
		err := op.call()
		var reply redis.Error
		switch {
		case err == nil:
			t.Errorf("%s of a hash key: no error", op.what)
		case errors.Is(err, dlock.ErrNoReply):
			t.Errorf("%s of a hash key: %v, an error reply reported as ErrNoReply", op.what, err)
		case !errors.As(err, &reply) || !strings.Contains(reply.Error(), "WRONGTYPE"):
			t.Errorf("%s of a hash key: %v, want Redis's WRONGTYPE reply", op.what, err)
		}
	}
}
