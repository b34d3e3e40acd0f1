package dlockrueidis

// pubsub.Conn on rueidis: one dedicated connection with pub/sub hooks.
// rueidis does not reconnect a dedicated connection, as go-redis's PubSub
// does, so conn does it itself: the hub's reader, in ReceiveTimeout, opens
// a new one after a broken connection and subscribes every channel again,
// with its own ctx. Those subscriptions' confirmations reach the hub, which
// takes one nobody waited for as the notice that messages may have been
// lost and wakes every waiter.
//
// Like go-redis's PubSub, (un)subscribing only queues the command: a writer
// goroutine of the connection sends it, and the confirmation arrives
// through the hooks. The hub calls Unsubscribe under its mutex, and
// Subscribe while other Subscribes of the channel wait for it; rueidis's
// Do would wait there a round trip, or, for a new connection, for a free
// connection of the blocking pool it shares with the application's
// BLPOPs. Only the reader waits for a connection.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

type conn struct {
	c rueidis.Client

	mu     sync.Mutex
	dc     rueidis.DedicatedClient // nil until the reader opened it, and after it broke
	broken <-chan error            // of dc: receives why it closed
	stop   func()                  // ends dc's writer
	outbox []outgoing              // to send on dc, in order
	wrote  chan struct{}           // signalled when outbox grows
	chans  map[string]bool
	schans map[string]bool
	queue  []any // received, not yet read: replies, or errors
	closed bool

	arrived chan struct{} // signalled when queue grows
	done    chan struct{} // closed by Close
}

// outgoing is one queued command; pong marks a PING, whose answer is
// queued as a *redis.Pong.
type outgoing struct {
	cmd  rueidis.Completed
	pong bool
}

func newConn(c rueidis.Client) *conn {
	return &conn{
		c: c, chans: map[string]bool{}, schans: map[string]bool{},
		arrived: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// push queues a received item (or an error reply) from dc, unless dc was
// dropped meanwhile; it never blocks rueidis's hook goroutine.
func (p *conn) push(dc rueidis.DedicatedClient, v any) {
	p.mu.Lock()
	if p.dc != dc {
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, v)
	p.mu.Unlock()
	signal(p.arrived)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// dedicate waits for a connection of rueidis's blocking pool until ctx
// ends or p closes. rueidis's Dedicate takes no ctx, so it runs on its own
// goroutine, which closes a connection that comes too late.
func (p *conn) dedicate(ctx context.Context) (rueidis.DedicatedClient, error) {
	got, abandon := make(chan rueidis.DedicatedClient), make(chan struct{})
	go func() {
		dc, _ := p.c.Dedicate()
		select {
		case got <- dc:
		case <-abandon:
			dc.Close()
		}
	}()
	select {
	case dc := <-got:
		return dc, nil
	case <-ctx.Done():
		close(abandon)
		return nil, ctx.Err()
	case <-p.done:
		close(abandon)
		return nil, redis.ErrClosed
	}
}

// open gives p a new connection, whose first commands subscribe every
// channel recorded, and starts its writer.
func (p *conn) open(ctx context.Context) error {
	dc, err := p.dedicate(ctx)
	if err != nil {
		return err
	}
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.push(dc, &redis.Message{Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.push(dc, &redis.Subscription{Kind: s.Kind, Channel: s.Channel, Count: int(s.Count)})
		},
	})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		dc.Close()
		return redis.ErrClosed
	}
	wctx, stop := context.WithCancel(context.Background())
	p.dc, p.broken, p.stop = dc, broken, stop
	p.wrote = make(chan struct{}, 1)
	p.outbox = nil
	if len(p.chans) > 0 {
		p.outbox = append(p.outbox, outgoing{cmd: p.c.B().Subscribe().Channel(keys(p.chans)...).Build()})
	}
	// One SSUBSCRIBE per slot: a cluster refuses one across slots.
	bySlot := map[uint16][]string{}
	for ch := range p.schans {
		bySlot[layout.Slot(ch)] = append(bySlot[layout.Slot(ch)], ch)
	}
	for _, chans := range bySlot {
		p.outbox = append(p.outbox, outgoing{cmd: p.c.B().Ssubscribe().Channel(chans...).Build()})
	}
	wrote := p.wrote
	p.mu.Unlock()
	signal(wrote)
	go p.write(wctx, dc, wrote)
	return nil
}

// write sends dc's queued commands in order until ctx ends (dc dropped).
// An error reply is queued for the reader, as go-redis's PubSub reports
// it; a broken connection is the reader's to notice, through broken.
func (p *conn) write(ctx context.Context, dc rueidis.DedicatedClient, wrote <-chan struct{}) {
	for {
		select {
		case <-wrote:
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		if p.dc != dc {
			p.mu.Unlock()
			return
		}
		out := p.outbox
		p.outbox = nil
		p.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		cmds := make([]rueidis.Completed, len(out))
		for i, o := range out {
			cmds[i] = o.cmd
		}
		for i, res := range dc.DoMulti(ctx, cmds...) {
			switch err := convErr(res.Error()); {
			case err == nil && out[i].pong:
				p.push(dc, &redis.Pong{})
			case isReply(err):
				p.push(dc, err)
			}
		}
	}
}

// enqueue queues a command for the current connection, if there is one;
// p.mu must be held. Without one, the reader's next open subscribes what
// the channel sets then say.
func (p *conn) enqueue(o outgoing) {
	if p.dc == nil {
		return
	}
	p.outbox = append(p.outbox, o)
	signal(p.wrote)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// send records or forgets channels and queues the (un)subscribe command;
// it does not wait for the server. A ctx that has ended fails it, and
// nothing changes.
func (p *conn) send(ctx context.Context, set map[string]bool, add bool, cmd rueidis.Completed, names []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return redis.ErrClosed
	}
	for _, n := range names {
		if add {
			set[n] = true
		} else {
			delete(set, n)
		}
	}
	p.enqueue(outgoing{cmd: cmd})
	return nil
}

func (p *conn) Subscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.chans, true, p.c.B().Subscribe().Channel(names...).Build(), names)
}

func (p *conn) SSubscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.schans, true, p.c.B().Ssubscribe().Channel(names...).Build(), names)
}

func (p *conn) Unsubscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.chans, false, p.c.B().Unsubscribe().Channel(names...).Build(), names)
}

func (p *conn) SUnsubscribe(ctx context.Context, names ...string) error {
	return p.send(ctx, p.schans, false, p.c.B().Sunsubscribe().Channel(names...).Build(), names)
}

// timeoutError is ReceiveTimeout's error when nothing arrived in time: a
// net.Error whose Timeout is true, as go-redis's.
type timeoutError struct{}

func (timeoutError) Error() string   { return "dlockrueidis: pub/sub receive timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// ReceiveTimeout returns the next confirmation, message or error reply.
// Without a connection it first opens one (waiting, past timeout, until
// ctx ends for a connection of the blocking pool) and subscribes the
// channels again. A connection that broke is reported once, as its error.
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
			if err, ok := v.(error); ok {
				return nil, err
			}
			return v, nil
		}
		opened, broken := p.dc != nil, p.broken
		p.mu.Unlock()
		if !opened {
			if err := p.open(ctx); err != nil {
				return nil, err
			}
			continue
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

// drop forgets the connection and what was queued for it; p.mu must be
// held. The returned function closes it rather than giving it back to the
// pool, where rueidis would unsubscribe it with no deadline; it must be
// called without p.mu.
func (p *conn) drop() (release func()) {
	dc, stop := p.dc, p.stop
	p.dc, p.stop, p.broken, p.outbox = nil, nil, nil, nil
	if dc == nil {
		return func() {}
	}
	return func() {
		stop()
		dc.Close()
	}
}

// Ping queues a PING; its answer counts as something received. Without a
// connection there is nothing to ping: the reader is opening one.
func (p *conn) Ping(ctx context.Context, _ ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return redis.ErrClosed
	}
	p.enqueue(outgoing{cmd: p.c.B().Ping().Build(), pong: true})
	return nil
}

func (p *conn) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return redis.ErrClosed
	}
	p.closed = true
	close(p.done)
	release := p.drop()
	p.mu.Unlock()
	release()
	signal(p.arrived)
	return nil
}
