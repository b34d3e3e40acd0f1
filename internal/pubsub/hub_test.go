package pubsub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := closeCluster(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := redistest.CheckGoroutines(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// testHub returns a classic hub on srv and a client for publishing, both
// closed with t.
func testHub(t *testing.T, srv *redistest.Server) (*Hub, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
	h := New(func(ctx context.Context) Conn { return rdb.Subscribe(ctx) })
	t.Cleanup(func() {
		_ = h.Close()
		_ = rdb.Close()
	})
	return h, rdb
}

// subscribe registers a waiter and waits for its confirmation.
func subscribe(t *testing.T, h *Hub, name string) *Waiter {
	t.Helper()
	w, err := h.Subscribe(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(false) })
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("subscription not confirmed within 5s")
	}
	return w
}

// woken reports which of ws receive a wake-up within d.
func woken(d time.Duration, ws ...*Waiter) []bool {
	got := make([]bool, len(ws))
	deadline := time.After(d)
	for {
		done := true
		for i, w := range ws {
			if got[i] {
				continue
			}
			select {
			case <-w.Wake():
				got[i] = true
			default:
				done = false
			}
		}
		if done {
			return got
		}
		select {
		case <-deadline:
			return got
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// TestWakeOneOrAll: "0" wakes the longest waiter only, anything else
// every waiter; a channel's last waiter unsubscribes it.
func TestWakeOneOrAll(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	ctx := context.Background()
	w1, w2 := subscribe(t, h, "ch"), subscribe(t, h, "ch")
	if err := rdb.Publish(ctx, "ch", UnlockMessage).Err(); err != nil {
		t.Fatal(err)
	}
	if got := woken(time.Second, w1, w2); !got[0] || got[1] {
		t.Fatalf("after %q: woken %v, want the first waiter only", UnlockMessage, got)
	}
	if err := rdb.Publish(ctx, "ch", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if got := woken(time.Second, w1, w2); count(got) != 2 {
		t.Fatalf("after \"1\": woken %v, want both", got)
	}
	w1.Close(true)
	w2.Close(true)
	if n := h.Waiters("ch"); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
	eventually(t, func() error {
		n, err := rdb.PubSubNumSub(ctx, "ch").Result()
		if err == nil && n["ch"] != 0 {
			err = fmt.Errorf("%d subscribers", n["ch"])
		}
		return err
	})
}

// TestCountedWake: a message "n" wakes the n longest counting waiters
// (SubscribeCounted) that are not woken yet, and every other waiter; "0"
// or a payload that is no positive count wakes one counting waiter; a
// wake-up given back with Return passes on at Close(false).
func TestCountedWake(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	ctx := context.Background()
	var cs []*Waiter
	for range 4 {
		w, err := h.SubscribeCounted(ctx, "ch")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close(false) })
		cs = append(cs, w)
	}
	plain := subscribe(t, h, "ch")
	// marker tells when the hub has handled what was published before it:
	// one connection delivers in order.
	marker := subscribe(t, h, "marker")
	publish := func(payload string) {
		t.Helper()
		for _, m := range []struct{ ch, p string }{{"ch", payload}, {"marker", "1"}} {
			if err := rdb.Publish(ctx, m.ch, m.p).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if !woken(5*time.Second, marker)[0] {
			t.Fatal("marker message not received")
		}
	}
	// wokenNow takes the wake-ups it sees; pending leaves them.
	wokenNow := func(ws ...*Waiter) []bool { return woken(0, ws...) }
	pending := func() []bool {
		got := make([]bool, len(cs))
		for i, w := range cs {
			got[i] = len(w.wake) == 1
		}
		return got
	}

	publish("2")
	if got := pending(); !got[0] || !got[1] || got[2] || got[3] {
		t.Fatalf("after \"2\": counting waiters woken %v, want the first two", got)
	}
	if !wokenNow(plain)[0] {
		t.Fatal("after \"2\": the plain waiter was not woken")
	}
	publish("3") // the first two are still woken: the next two, no more
	if got := pending(); !got[0] || !got[1] || !got[2] || !got[3] {
		t.Fatalf("after \"3\": counting waiters woken %v, want all four", got)
	}
	_ = wokenNow(cs...)
	publish("1")
	if got := wokenNow(cs...); count(got) != 1 || !got[0] {
		t.Fatalf("after \"1\": counting waiters woken %v, want the first only", got)
	}
	for _, p := range []string{"-1", "x"} {
		publish(p)
		if got := wokenNow(cs...); count(got) != 1 || !got[0] {
			t.Fatalf("after %q: counting waiters woken %v, want the first only", p, got)
		}
		_ = wokenNow(plain)
	}
	cs[0].Return()
	cs[0].Close(false)
	if got := woken(time.Second, cs[1:]...); count(got) != 1 || !got[0] {
		t.Fatalf("after Return and Close(false): woken %v, want the next waiter", got)
	}
}

// TestUnusedWakeUpPasses: a woken waiter that leaves without trying hands
// its wake-up to the next one, so an unlock message is never lost.
func TestUnusedWakeUpPasses(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	w1, w2 := subscribe(t, h, "ch"), subscribe(t, h, "ch")
	if err := rdb.Publish(context.Background(), "ch", UnlockMessage).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if len(w1.wake) != 1 {
			return fmt.Errorf("first waiter not woken")
		}
		return nil
	})
	w1.Close(false)
	if got := woken(time.Second, w2); !got[0] {
		t.Fatal("the wake-up the first waiter left unused did not pass to the second")
	}
}

// TestResubscriptionWakesAll: when the subscription connection is killed,
// messages may be lost until go-redis has reconnected and resubscribed, so
// every waiter is woken once the channel is subscribed again.
func TestResubscriptionWakesAll(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	ctx := context.Background()
	w1, w2 := subscribe(t, h, "ch"), subscribe(t, h, "ch")
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if got := woken(10*time.Second, w1, w2); count(got) != 2 {
		t.Fatalf("after the reconnect: woken %v, want both", got)
	}
	if err := rdb.Publish(ctx, "ch", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if got := woken(time.Second, w1, w2); count(got) != 2 {
		t.Fatalf("after the reconnect, a message woke %v, want both", got)
	}
}

// TestFrozenServerReopens: a server that stops answering (SIGSTOP) keeps
// the connection open, so go-redis sees no error. The hub's reader pings a
// silent connection and replaces it when the ping goes unanswered; once
// the server answers again the waiters are subscribed anew and woken.
func TestFrozenServerReopens(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	ctx := context.Background()
	w := subscribe(t, h, "ch")
	freeze(t, srv, h)()
	if got := woken(10*time.Second, w); !got[0] {
		t.Fatal("waiter not woken after the server came back")
	}
	if err := rdb.Publish(ctx, "ch", UnlockMessage).Err(); err != nil {
		t.Fatal(err)
	}
	if got := woken(time.Second, w); !got[0] {
		t.Fatal("waiter not woken by a message after the server came back")
	}
	eventually(t, func() error {
		n, err := rdb.PubSubNumSub(ctx, "ch").Result()
		if err == nil && n["ch"] != 1 {
			err = fmt.Errorf("%d subscribers, want 1 (the frozen connection closed)", n["ch"])
		}
		return err
	})
}

// freeze pauses srv until h has replaced its connection: the reader gives
// up on a frozen connection after two silent health intervals and opens
// another, which cannot be set up either. It returns the function that
// resumes srv, also called at cleanup.
func freeze(t *testing.T, srv *redistest.Server, h *Hub) (resume func()) {
	t.Helper()
	first := h.shard("")
	srv.Pause()
	resume = sync.OnceFunc(srv.Resume)
	t.Cleanup(resume)
	awaitCond(t, 4*healthInterval, func() error {
		if h.shard("") == first {
			return errors.New("the frozen connection was not replaced")
		}
		return nil
	})
	return resume
}

// shard returns the hub's current shard for key (for tests).
func (h *Hub) shard(key string) *shard {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shards[key]
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, cond func() error) {
	t.Helper()
	awaitCond(t, 5*time.Second, cond)
}

// awaitCond polls cond until it returns nil, failing the test with its
// last error after timeout.
func awaitCond(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSubscribeAfterLostConfirmation: a SUBSCRIBE whose confirmation went
// with a connection that broke, for a channel whose waiter left before
// the reconnect (so go-redis does not subscribe it again), must not be
// counted as still on its way: the next subscription of that channel
// would take its own confirmation for the lost one's and never be ready,
// and its waiter would sleep until the lock's TTL.
func TestSubscribeAfterLostConfirmation(t *testing.T) {
	srv := redistest.NewServer(t)
	h, _ := testHub(t, srv)
	subscribe(t, h, "keep") // the connection stays subscribed to something

	srv.Pause() // the SUBSCRIBE below gets no answer
	w, err := h.Subscribe(context.Background(), "lost")
	if err != nil {
		srv.Resume()
		t.Fatal(err)
	}
	w.Close(false)
	if err := srv.Restart(); err != nil { // the connection breaks
		t.Fatal(err)
	}
	w2, err := h.Subscribe(context.Background(), "lost")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(false)
	select {
	case <-w2.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("a subscription after a reconnect was not confirmed within 5s: a lost one's count was kept")
	}
}

// TestReopenSkipsLeftChannels: after a frozen server's connection is
// replaced, the hub subscribes the channels on the new one after a pause;
// a channel whose last waiter left during that pause is not subscribed
// again (it would stay subscribed with no waiter).
func TestReopenSkipsLeftChannels(t *testing.T) {
	srv := redistest.NewServer(t)
	h, rdb := testHub(t, srv)
	ctx := context.Background()
	stay := subscribe(t, h, "stay")
	gone, err := h.Subscribe(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close(false)
	select {
	case <-gone.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("subscription not confirmed within 5s")
	}
	first := h.shard("")
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	// Polled every 10 ms: well within the pause (backoff) before the
	// new connection subscribes.
	awaitCond(t, 4*healthInterval, func() error {
		if h.shard("") == first {
			return errors.New("the frozen connection was not replaced")
		}
		return nil
	})
	gone.Close(false)
	srv.Resume()
	resumed = true
	if got := woken(10*time.Second, stay); !got[0] {
		t.Fatal("waiter not woken after the server came back")
	}
	eventually(t, func() error {
		n, err := rdb.PubSubNumSub(ctx, "stay", "gone").Result()
		if err == nil && (n["stay"] != 1 || n["gone"] != 0) {
			err = fmt.Errorf("subscribers: %v, want stay 1, gone 0", n)
		}
		return err
	})
}
