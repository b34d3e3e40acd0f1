package dlockrueidis

// pubsub.Conn on rueidis: one dedicated connection with pub/sub hooks.
// rueidis does not reconnect a dedicated connection, as go-redis's PubSub
// does, so conn does it itself: the read after a broken connection opens a
// new one and subscribes every channel again. Those subscriptions'
// confirmations reach the hub, which takes one nobody waited for as the
// notice that messages may have been lost and wakes every waiter.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

type conn struct {
	c rueidis.Client

	mu      sync.Mutex
	dc      rueidis.DedicatedClient // nil until used, and after it broke
	cancel  func()
	broken  <-chan error // of dc: receives why it closed
	chans   map[string]bool
	schans  map[string]bool
	queue   []any         // received, not yet read
	arrived chan struct{} // signalled when queue grows
	closed  bool
}

func newConn(c rueidis.Client) *conn {
	return &conn{c: c, chans: map[string]bool{}, schans: map[string]bool{}, arrived: make(chan struct{}, 1)}
}

// push queues a received item; it never blocks rueidis's hook goroutine.
func (p *conn) push(v any) {
	p.mu.Lock()
	p.queue = append(p.queue, v)
	p.mu.Unlock()
	select {
	case p.arrived <- struct{}{}:
	default:
	}
}

// open returns the dedicated connection, opening it if needed; p.mu must
// be held. On a new connection, again subscribes the channels already
// recorded; it must be called without p.mu, since the confirmations go
// through the hooks, which take it.
func (p *conn) open() (dc rueidis.DedicatedClient, again func(ctx context.Context) error, err error) {
	again = func(context.Context) error { return nil }
	if p.closed {
		return nil, again, redis.ErrClosed
	}
	if p.dc != nil {
		return p.dc, again, nil
	}
	dc, cancel := p.c.Dedicate()
	p.broken = dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.push(&redis.Message{Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.push(&redis.Subscription{Kind: s.Kind, Channel: s.Channel, Count: int(s.Count)})
		},
	})
	p.dc, p.cancel = dc, cancel
	chans, schans := keys(p.chans), keys(p.schans)
	again = func(ctx context.Context) error {
		var errs []error
		if len(chans) > 0 {
			errs = append(errs, dc.Do(ctx, dc.B().Subscribe().Channel(chans...).Build()).Error())
		}
		if len(schans) > 0 {
			errs = append(errs, dc.Do(ctx, dc.B().Ssubscribe().Channel(schans...).Build()).Error())
		}
		return convErr(errors.Join(errs...))
	}
	return dc, again, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// send records or forgets channels and sends the (un)subscribe command.
func (p *conn) send(ctx context.Context, set map[string]bool, add bool, build func(rueidis.DedicatedClient) rueidis.Completed, names []string) error {
	p.mu.Lock()
	dc, again, err := p.open()
	for _, n := range names {
		if add {
			set[n] = true
		} else {
			delete(set, n)
		}
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := again(ctx); err != nil {
		return err
	}
	return convErr(dc.Do(ctx, build(dc)).Error())
}

func (p *conn) Subscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.chans, true, func(dc rueidis.DedicatedClient) rueidis.Completed {
		return dc.B().Subscribe().Channel(names...).Build()
	}, names)
}

func (p *conn) SSubscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.schans, true, func(dc rueidis.DedicatedClient) rueidis.Completed {
		return dc.B().Ssubscribe().Channel(names...).Build()
	}, names)
}

func (p *conn) Unsubscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.chans, false, func(dc rueidis.DedicatedClient) rueidis.Completed {
		return dc.B().Unsubscribe().Channel(names...).Build()
	}, names)
}

func (p *conn) SUnsubscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.schans, false, func(dc rueidis.DedicatedClient) rueidis.Completed {
		return dc.B().Sunsubscribe().Channel(names...).Build()
	}, names)
}

// timeoutError is ReceiveTimeout's error when nothing arrived in time: a
// net.Error whose Timeout is true, as go-redis's.
type timeoutError struct{}

func (timeoutError) Error() string   { return "dlockrueidis: pub/sub receive timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// ReceiveTimeout returns the next confirmation or message. A connection
// that broke is reported once, as its error; the next call opens a new
// one and subscribes the channels again.
func (p *conn) ReceiveTimeout(ctx context.Context, timeout time.Duration) (any, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, redis.ErrClosed
		}
		if len(p.queue) > 0 {
			v := p.queue[0]
			p.queue = p.queue[1:]
			p.mu.Unlock()
			return v, nil
		}
		_, again, err := p.open()
		broken := p.broken
		p.mu.Unlock()
		if err == nil {
			err = again(ctx)
		}
		if err != nil {
			p.mu.Lock()
			release := p.drop()
			p.mu.Unlock()
			release()
			return nil, err
		}
		select {
		case <-p.arrived:
		case err := <-broken:
			p.mu.Lock()
			release := p.drop()
			p.mu.Unlock()
			release()
			if err == nil {
				err = errors.New("dlockrueidis: pub/sub connection closed")
			}
			return nil, fmt.Errorf("dlockrueidis: pub/sub connection lost: %w", err)
		case <-t.C:
			return nil, timeoutError{}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// drop forgets the connection; p.mu must be held. The returned function
// gives it back to rueidis, and must be called without p.mu: giving it
// back waits for its hooks, which take p.mu.
func (p *conn) drop() (release func()) {
	release = p.cancel
	if release == nil {
		release = func() {}
	}
	p.dc, p.cancel, p.broken = nil, nil, nil
	return release
}

// Ping sends PING; its answer counts as something received.
func (p *conn) Ping(ctx context.Context, _ ...string) error {
	p.mu.Lock()
	dc, again, err := p.open()
	p.mu.Unlock()
	if err == nil {
		err = again(ctx)
	}
	if err != nil {
		return err
	}
	if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
		return convErr(err)
	}
	p.push(&redis.Pong{})
	return nil
}

func (p *conn) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return redis.ErrClosed
	}
	p.closed = true
	release := p.drop()
	p.mu.Unlock()
	release()
	select {
	case p.arrived <- struct{}{}:
	default:
	}
	return nil
}
