// Package pubsub shares one Redis subscription connection among every waiter
// of a dlock Client.
//
// Channels are reference-counted: the first waiter on a channel subscribes,
// the last one to leave unsubscribes. Messages are fanned out locally. An
// unlock message ("0") wakes one waiter, because only one can take the lock;
// any other message ("1", the read-unlock message) and a resubscription after
// a reconnect wake every waiter on the channel, since messages published
// while the connection was down are lost.
package pubsub

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// UnlockMessage is the payload that wakes a single waiter.
const UnlockMessage = "0"

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: hub closed")

// Hub multiplexes waiters over one *redis.PubSub.
type Hub struct {
	open func(ctx context.Context) *redis.PubSub

	mu       sync.Mutex
	ps       *redis.PubSub
	channels map[string]*channel
	inflight map[string]int // SUBSCRIBE commands sent but not yet confirmed
	closed   bool
	done     sync.WaitGroup
}

type channel struct {
	ready   chan struct{} // closed once the subscription is confirmed
	waiters []*Waiter     // FIFO: unlock messages go to the longest waiter
}

// Waiter is one goroutine's interest in a channel.
type Waiter struct {
	hub   *Hub
	name  string
	ready chan struct{}
	wake  chan struct{}
}

// New returns a hub that opens its connection with open on first use.
func New(open func(ctx context.Context) *redis.PubSub) *Hub {
	return &Hub{open: open, channels: map[string]*channel{}, inflight: map[string]int{}}
}

// Subscribe registers a waiter on the named channel. The SUBSCRIBE is sent
// before it returns; Ready is closed when Redis has confirmed it, after which
// no message on the channel can be missed while the connection stays up.
func (h *Hub) Subscribe(ctx context.Context, name string) (*Waiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.ps == nil {
		h.ps = h.open(context.WithoutCancel(ctx))
		msgs := h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
		h.done.Add(1)
		go h.dispatch(msgs)
	}
	ch := h.channels[name]
	if ch == nil {
		h.inflight[name]++
		if err := h.ps.Subscribe(ctx, name); err != nil {
			h.inflight[name]--
			return nil, err
		}
		ch = &channel{ready: make(chan struct{})}
		h.channels[name] = ch
	}
	w := &Waiter{hub: h, name: name, ready: ch.ready, wake: make(chan struct{}, 1)}
	ch.waiters = append(ch.waiters, w)
	return w, nil
}

// Ready is closed once the subscription is confirmed by Redis.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Wake receives a value when the waiter should try again.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Close removes the waiter. If it was woken but did not use the wake-up
// (consumed is false), the wake-up passes to the next waiter so that no
// unlock message is lost. The last waiter unsubscribes the channel.
func (w *Waiter) Close(consumed bool) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.channels[w.name]
	if ch == nil {
		return
	}
	for i, o := range ch.waiters {
		if o == w {
			ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.wake:
		if !consumed {
			ch.wakeOne()
		}
	default:
	}
	if len(ch.waiters) == 0 {
		delete(h.channels, w.name)
		if !h.closed {
			// The reply is read by dispatch; an error here means the
			// connection is down, and go-redis forgets the channel too.
			_ = h.ps.Unsubscribe(context.Background(), w.name)
		}
	}
}

// Waiters reports how many waiters the hub has on a channel (for tests).
func (h *Hub) Waiters(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.channels[name]; ch != nil {
		return len(ch.waiters)
	}
	return 0
}

// Close closes the connection and wakes every waiter.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	for _, ch := range h.channels {
		ch.wakeAll()
	}
	ps := h.ps
	h.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	h.done.Wait()
	return err
}

// dispatch runs until the PubSub is closed.
func (h *Hub) dispatch(msgs <-chan any) {
	defer h.done.Done()
	for m := range msgs {
		h.mu.Lock()
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				h.confirmed(m.Channel)
			}
		case *redis.Message:
			if ch := h.channels[m.Channel]; ch != nil {
				if m.Payload == UnlockMessage {
					ch.wakeOne()
				} else {
					ch.wakeAll()
				}
			}
		}
		h.mu.Unlock()
	}
}

// confirmed handles a subscribe confirmation. One that nobody is waiting
// for is a resubscription after a reconnect: messages may have been lost
// meanwhile, so every waiter on the channel tries again.
func (h *Hub) confirmed(name string) {
	ch := h.channels[name]
	if h.inflight[name] > 0 {
		h.inflight[name]--
		if h.inflight[name] == 0 {
			delete(h.inflight, name)
		}
		if ch != nil && h.inflight[name] == 0 {
			select {
			case <-ch.ready:
			default:
				close(ch.ready)
			}
		}
		return
	}
	if ch != nil {
		select {
		case <-ch.ready:
		default:
			close(ch.ready)
		}
		ch.wakeAll()
	}
}

func (ch *channel) wakeOne() {
	for _, w := range ch.waiters {
		select {
		case w.wake <- struct{}{}:
			return
		default: // already woken; try the next one
		}
	}
}

func (ch *channel) wakeAll() {
	for _, w := range ch.waiters {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
