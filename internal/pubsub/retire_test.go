package pubsub

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// heldConn is a go-redis PubSub whose SUBSCRIBE of one channel waits for
// release: a send still in flight when the hub retires the connection.
type heldConn struct {
	*redis.PubSub
	name              string
	entered, release  chan struct{}
	closed            chan struct{}
	enterOnce, closeO sync.Once
}

func (c *heldConn) Subscribe(ctx context.Context, names ...string) error {
	if slices.Contains(names, c.name) {
		c.enterOnce.Do(func() { close(c.entered) })
		<-c.release
	}
	return c.PubSub.Subscribe(ctx, names...)
}

func (c *heldConn) Close() error {
	err := c.PubSub.Close()
	c.closeO.Do(func() { close(c.closed) })
	return err
}

// TestSendOnARetiredConnectionKeepsTheWaiter: a Subscribe whose SUBSCRIBE
// is still being sent when the hub gives up on the (frozen) connection and
// moves its channels to a new one does not fail with the old connection's
// error: the hub subscribes the channel again, and the waiter is readied
// and woken through the new connection.
func TestSendOnARetiredConnectionKeepsTheWaiter(t *testing.T) {
	srv := redistest.NewServer(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
	held := &heldConn{name: "x", entered: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	var opened atomic.Int32
	h := New(func(ctx context.Context) Conn {
		ps := rdb.Subscribe(ctx)
		if opened.Add(1) == 1 {
			held.PubSub = ps
			return held
		}
		return ps
	})
	t.Cleanup(func() {
		_ = h.Close()
		_ = rdb.Close()
	})
	subscribe(t, h, "a") // the first connection, its reader started

	type result struct {
		w   *Waiter
		err error
	}
	got := make(chan result, 1)
	go func() {
		w, err := h.Subscribe(ctx, "x")
		got <- result{w, err}
	}()
	select {
	case <-held.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the SUBSCRIBE of x was not sent")
	}
	resume := freeze(t, srv, h)
	select {
	case <-held.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced connection was not closed")
	}
	close(held.release) // the SUBSCRIBE goes out on the closed connection
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe of x did not return")
	}
	resume()
	if r.err != nil {
		t.Fatalf("Subscribe failed although the hub moved its channel: %v", r.err)
	}
	t.Cleanup(func() { r.w.Close(false) })
	select {
	case <-r.w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("x not confirmed on the new connection within 10s")
	}
	select {
	case <-r.w.Wake(): // the move's: a message may have been lost meanwhile
	case <-time.After(5 * time.Second):
		t.Fatal("x's waiter not woken when its channel was subscribed again")
	}
	if err := rdb.Publish(ctx, "x", UnlockMessage).Err(); err != nil {
		t.Fatal(err)
	}
	if w := woken(2*time.Second, r.w); !w[0] {
		t.Fatal("x's waiter not woken by a message on the new connection")
	}
}
