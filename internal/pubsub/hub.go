// Package pubsub shares Redis subscription connections among every waiter of
// a dlock Client.
//
// Channels are reference-counted: the first waiter on a channel subscribes,
// the last one to leave unsubscribes. Messages are fanned out locally. An
// unlock message ("0") wakes one waiter, because only one can take the lock;
// any other message ("1", the read-unlock message) and a resubscription after
// a reconnect wake every waiter on the channel, since messages published
// while the connection was down are lost. A counting waiter (SubscribeCounted:
// a permit semaphore's) is woken by a message "n" only if it is among the
// first n counting waiters not woken yet, as Redisson wakes at most n waiters
// per client for a semaphore's message: only n can take a permit.
//
// A classic hub (New) has one connection and uses SUBSCRIBE. A sharded hub
// (NewSharded, for Redis 7 clusters) uses SSUBSCRIBE, which a cluster serves
// only on the master that owns the channel's hash slot, and keeps one
// connection per master, as Redisson multiplexes its channels over a few
// connections per node: a Client waiting on locks in thousands of slots
// holds as many connections as the cluster has masters, not one per slot.
// Each SSUBSCRIBE carries the channels of one slot, since a cluster refuses
// (CROSSSLOT) one that spans slots. For the same reason the sharded hub owns
// reconnection: go-redis would resubscribe every channel of a connection
// with one SSUBSCRIBE, so on a broken or silent connection the hub
// closes it and subscribes its channels again, slot by slot, on the
// connections of the masters that own them then. When a slot moves (a
// reshard or a failover) the cluster drops its subscribers with an
// unsolicited SUNSUBSCRIBE, and refuses an SSUBSCRIBE for it with MOVED;
// the hub then moves that slot's channels to the new owner's connection,
// and wakes their waiters when they are confirmed. Any other refusal
// (NOPERM) is reported through OnError.
//
// Each connection has a reader goroutine that also checks its health: when
// nothing arrives for a while it sends PING, and when the PING goes
// unanswered (a frozen server) it reopens the connection. On a classic hub
// network errors are left to go-redis, which reconnects and resubscribes.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// UnlockMessage is the payload that wakes a single waiter.
const UnlockMessage = "0"

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: hub closed")

// errSlotMoved is why a sharded connection dropped by its node is reopened.
var errSlotMoved = errors.New("pubsub: the node dropped the subscription (slot moved)")

const (
	// healthInterval is how long a connection may stay silent before the
	// reader pings it, and how long the ping may go unanswered before the
	// connection is reopened.
	healthInterval = 2 * time.Second
	// maxBackoff bounds the pause between attempts to reach a shard again.
	maxBackoff = 250 * time.Millisecond
	// closeWait bounds how long Close waits for the connections to close
	// and for the hub's goroutines to end. go-redis keeps only a ctx's
	// deadline, not its cancellation, while it dials and greets a node,
	// and closing a PubSub waits for a dial in progress: a node that
	// does not answer would hold Close until go-redis's own timeouts
	// (DialTimeout, ReadTimeout), which still end what Close left.
	closeWait = 100 * time.Millisecond
)

// Conn is one subscription connection as the hub uses it: a go-redis
// *redis.PubSub is one, and another Redis client library's driver
// (dlockrueidis) provides its own. Receive returns a *redis.Subscription
// for each (un)subscribe confirmation and a *redis.Message for each
// message; after a reconnect the Conn subscribes its channels again, and
// their confirmations tell the hub that messages may have been lost.
type Conn interface {
	Subscribe(ctx context.Context, channels ...string) error
	SSubscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	SUnsubscribe(ctx context.Context, channels ...string) error
	ReceiveTimeout(ctx context.Context, timeout time.Duration) (any, error)
	Ping(ctx context.Context, payload ...string) error
	Close() error
}

// Router tells a sharded hub where a channel is served.
type Router struct {
	// Slot returns the channel's hash slot: one SSUBSCRIBE carries the
	// channels of one slot.
	Slot func(channel string) int
	// Node names the master serving the channel's slot, as the routing
	// table says now: the hub keeps one connection per name. It may
	// return "" when it does not know; a wrong answer costs a refused
	// SSUBSCRIBE (MOVED), after which the hub asks again.
	Node func(ctx context.Context, channel string) string
	// Refresh has the routing table reloaded, before channels are
	// subscribed again after their node failed, refused or dropped them.
	// It returns once Node answers from the reloaded table, or when ctx
	// ends. The hub runs one at a time: concurrent calls wait for the
	// one in progress (Coalesce).
	Refresh func(ctx context.Context)
}

// Hub multiplexes waiters over shared subscriptions.
type Hub struct {
	open    func(ctx context.Context, node string) Conn
	sharded bool
	route   Router
	// life ends with Close; it bounds the goroutines that move channels.
	life context.Context
	end  context.CancelFunc

	// OnError, if set before first use, hears of error replies to
	// subscriptions that the hub cannot repair itself, such as a NOPERM
	// for a channel the ACL does not allow: the waiters then fall back to
	// waking at the lock's TTL.
	OnError func(error)
	// OnReconnect, if set before first use, hears of each connection
	// found broken, silent or moved, which is being opened again, with
	// what was wrong. It must return quickly and not use the hub.
	OnReconnect func(error)

	mu       sync.Mutex
	shards   map[string]*shard
	channels map[string]*channel
	closed   bool
	done     sync.WaitGroup
}

// shard is one subscription connection (of a sharded hub: to one master)
// and its bookkeeping. All fields but ps and stop are guarded by the hub's
// mutex.
type shard struct {
	key  string
	ps   Conn
	stop context.CancelFunc // ends the reader

	// started is set when the reader starts. Until then the connection
	// is being opened by whoever created it (a Subscribe or rehome),
	// and other Subscribes wait for opened, closed once the reader
	// starts or the shard is closed, rather than send on it meanwhile.
	started  bool
	opened   chan struct{}
	openOnce sync.Once

	// inflight counts (S)SUBSCRIBE commands sent on this connection whose
	// confirmation has not arrived yet, per channel.
	inflight map[string]int
	// channels is how many channels are subscribed on this shard.
	channels int
	// retries counts reopenings since the last confirmation, for backoff.
	retries int
}

type channel struct {
	// shard is the connection the channel is subscribed on; nil while a
	// sharded hub moves it to another (rehome).
	shard *shard
	ready chan struct{} // closed once the subscription is confirmed
	// sent is closed once the Subscribe that created the channel has sent
	// its (S)SUBSCRIBE, or failed to: other Subscribes of the channel
	// wait for it, then join the channel or, if it is gone, try again.
	sent    chan struct{}
	waiters []*Waiter // FIFO: unlock messages go to the longest waiter
	// moved is set when the channel was subscribed again on a new
	// connection: its confirmation must wake every waiter.
	moved bool
}

// Waiter is one goroutine's interest in a channel.
type Waiter struct {
	hub   *Hub
	name  string
	ready chan struct{}
	wake  chan struct{}
	// A listener (Listen) also keeps the payloads of the messages, and
	// whether some may have been missed; guarded by the hub's mutex.
	listens bool
	msgs    []string
	gap     bool

	// counts: a message "n" wakes at most n counting waiters
	// (SubscribeCounted); guarded by the hub's mutex.
	counts bool
}

// maxKept bounds the payloads a listener keeps unread; past it they are
// dropped and the listener is told that it missed some.
const maxKept = 1024

// New returns a classic hub: one connection, opened with open on first use,
// and SUBSCRIBE. open must return a PubSub without channels.
func New(open func(ctx context.Context) Conn) *Hub {
	return newHub(func(ctx context.Context, _ string) Conn { return open(ctx) }, false, Router{
		Slot:    func(string) int { return 0 },
		Node:    func(context.Context, string) string { return "" },
		Refresh: func(context.Context) {},
	})
}

// NewSharded returns a hub that uses SSUBSCRIBE with one connection per
// master, as r names them. open must return a PubSub without channels that
// connects, on its first SSUBSCRIBE, to the named master (or to the master
// serving that SSUBSCRIBE's channels: redis.ClusterClient.SSubscribe does).
func NewSharded(open func(ctx context.Context, node string) Conn, r Router) *Hub {
	return newHub(open, true, r)
}

func newHub(open func(ctx context.Context, node string) Conn, sharded bool, r Router) *Hub {
	life, end := context.WithCancel(context.Background())
	r.Refresh = Coalesce(r.Refresh)
	return &Hub{
		open: open, sharded: sharded, route: r, life: life, end: end,
		shards: map[string]*shard{}, channels: map[string]*channel{},
	}
}

// Subscribe registers a waiter on the named channel. The subscription is
// sent before it returns; Ready is closed when Redis has confirmed it, after
// which no message on the channel can be missed while the connection stays
// up.
//
// The (S)SUBSCRIBE, and the dial of a new connection, are sent without the
// hub's mutex: a node that does not answer holds up only the Subscribes of
// channels on its connection, which wait for the connection to open (or
// their ctx to end). Concurrent Subscribes of one channel share one
// command: the others wait until it was sent, then join the channel or, if
// sending failed, try again themselves. A failed send returns its error to
// its caller and leaves no channel, connection or count behind. Close wakes
// every caller waiting for another's send.
func (h *Hub) Subscribe(ctx context.Context, name string) (*Waiter, error) {
	for {
		key := h.nodeOf(ctx, name)
		h.mu.Lock()
		j, err := h.join(ctx, key, name)
		h.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case j.wait != nil:
			if err := h.await(ctx, j.wait); err != nil {
				return nil, err
			}
		case j.ch == nil:
			return j.w, nil
		default:
			return h.send(ctx, j)
		}
	}
}

// joined is what join did: it registered w on a channel already sent, or
// placed a new channel ch on s with w as its first waiter, for the caller
// to send, or found a send or a dial in progress to wait for.
type joined struct {
	w    *Waiter
	ch   *channel
	s    *shard
	wait <-chan struct{}
}

// join registers a waiter on name, whose connection is key's, or says what
// to wait for first; h.mu must be held.
func (h *Hub) join(ctx context.Context, key, name string) (joined, error) {
	if h.closed {
		return joined{}, ErrClosed
	}
	if ch := h.channels[name]; ch != nil {
		if !isClosed(ch.sent) {
			return joined{wait: ch.sent}, nil
		}
		return joined{w: ch.add(h, name)}, nil
	}
	s := h.shards[key]
	if s == nil {
		s = h.newShard(ctx, key)
		h.shards[key] = s
	} else if !isClosed(s.opened) {
		return joined{wait: s.opened}, nil
	}
	ch := &channel{shard: s, ready: make(chan struct{}), sent: make(chan struct{})}
	h.channels[name] = ch
	s.channels++
	s.inflight[name]++
	return joined{w: ch.add(h, name), ch: ch, s: s}, nil
}

// await waits, without h.mu, for a send or dial in progress to end, or for
// the hub to close; the caller then tries again.
func (h *Hub) await(ctx context.Context, gate <-chan struct{}) error {
	select {
	case <-gate:
		return nil
	case <-h.life.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pubsub: waiting for a subscription in progress: %w", ctx.Err())
	}
}

// send sends the (S)SUBSCRIBE of the channel join placed, without h.mu,
// then lets the Subscribes waiting for it go on. Sent, the waiter is
// returned and the connection's reader starts if it has not (the reader
// starts only now: a go-redis cluster PubSub picks its node by the
// channels it has when it first connects). If sending failed, or the hub
// closed meanwhile, the waiter leaves as Close(true) would, and the caller
// gets the error; unless the hub moved the channel off the connection
// meanwhile (a reopen retired it, which may be why the send failed): the
// channel is then the hub's to subscribe again, and its confirmation
// readies the waiter.
func (h *Hub) send(ctx context.Context, j joined) (*Waiter, error) {
	err := h.subscribe(ctx, j.s.ps, j.w.name)
	h.mu.Lock()
	defer h.mu.Unlock()
	close(j.ch.sent)
	if err == nil && h.closed {
		err = ErrClosed
	}
	if err != nil && !h.closed && j.ch.shard != j.s && h.channels[j.w.name] == j.ch {
		return j.w, nil
	}
	if err != nil {
		h.settle(j.s, j.w.name)
		h.leave(j.w, true)
		return nil, err
	}
	if !j.s.started && h.shards[j.s.key] == j.s {
		h.start(j.s)
	}
	return j.w, nil
}

// add registers a new waiter on ch, the channel named name; h.mu must be
// held.
func (ch *channel) add(h *Hub, name string) *Waiter {
	w := &Waiter{hub: h, name: name, ready: ch.ready, wake: make(chan struct{}, 1)}
	ch.waiters = append(ch.waiters, w)
	return w
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Listen registers a listener on the named channel: a waiter that also
// keeps every message's payload, in order, for Messages. It is woken by
// every message (never passed an unlock message meant for one waiter).
func (h *Hub) Listen(ctx context.Context, name string) (*Waiter, error) {
	w, err := h.Subscribe(ctx, name)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	w.listens = true
	h.mu.Unlock()
	return w, nil
}

// SubscribeCounted registers a counting waiter on the named channel, for
// channels whose messages say how many waiters can go on (a permit
// semaphore's count): a message "n" (n >= 1; anything else counts as 1)
// wakes this waiter only if fewer than n counting waiters ahead of it were
// woken by it. Other waiters on the channel are woken as Subscribe says.
func (h *Hub) SubscribeCounted(ctx context.Context, name string) (*Waiter, error) {
	w, err := h.Subscribe(ctx, name)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	w.counts = true
	h.mu.Unlock()
	return w, nil
}

// Messages returns the payloads a listener received since its last call,
// in order, and whether messages may have been missed meanwhile (the
// subscription was opened again after a reconnect, or more than maxKept
// were waiting): the listener should then read the state they describe.
func (w *Waiter) Messages() (msgs []string, gap bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	msgs, gap = w.msgs, w.gap
	w.msgs, w.gap = nil, false
	return msgs, gap
}

// Ready is closed once the subscription is confirmed by Redis.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Wake receives a value when the waiter should try again.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Return gives back a wake-up the waiter received and did not use (it got
// what it waited for another way), so that Close(false) passes it on.
func (w *Waiter) Return() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Close removes the waiter. If it was woken but did not use the wake-up
// (consumed is false), the wake-up passes to the next waiter so that no
// unlock message is lost. The last waiter unsubscribes the channel, and on
// a sharded hub the last channel of a shard closes its connection.
func (w *Waiter) Close(consumed bool) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leave(w, consumed)
}

// leave is Waiter.Close with h.mu held.
func (h *Hub) leave(w *Waiter, consumed bool) {
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
		h.drop(w.name, ch)
	}
}

// drop forgets a channel whose last waiter left; h.mu must be held. The
// last channel of a sharded connection, or of one not started yet, closes
// it. Otherwise the channel is unsubscribed, unless the connection is not
// started: its opener may be dialing with go-redis's PubSub mutex held,
// and the channel, if go-redis subscribes it, is ignored.
func (h *Hub) drop(name string, ch *channel) {
	delete(h.channels, name)
	s := ch.shard
	if s == nil {
		return // being moved: rehome skips a channel gone meanwhile
	}
	s.channels--
	if h.closed || h.shards[s.key] != s {
		return
	}
	if s.channels == 0 && (h.sharded || !s.started) {
		h.retire(s)
		return
	}
	if !s.started {
		return
	}
	// The reply is read by the reader; an error here means the connection
	// is down, and go-redis forgets the channel too.
	_ = h.unsubscribe(context.Background(), s.ps, name)
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

// Connections reports how many subscription connections the hub has open
// or is opening (for tests).
func (h *Hub) Connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.shards)
}

// Close closes every connection and wakes every waiter. It waits for the
// connections to close and the hub's goroutines to end for at most
// closeWait: one dialing a node that does not answer ends later, at the
// dial's timeout, and does nothing then.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.end()
	for _, ch := range h.channels {
		ch.wakeAll()
	}
	shards := slices.Collect(maps.Values(h.shards))
	for _, s := range shards {
		s.halt()
	}
	h.shards = map[string]*shard{}
	h.mu.Unlock()
	return h.finish(shards)
}

// finish closes the connections of a closed hub, each on its own goroutine
// (go-redis's Close waits for a dial in progress), and waits for them and
// for the hub's goroutines until closeWait has passed.
func (h *Hub) finish(shards []*shard) error {
	closed := make(chan error, len(shards))
	for _, s := range shards {
		go func() { closed <- s.closeConn() }()
	}
	ended := make(chan struct{})
	go func() {
		h.done.Wait()
		close(ended)
	}()
	timeout := time.NewTimer(closeWait)
	defer timeout.Stop()
	var errs []error
	for range shards {
		select {
		case err := <-closed:
			errs = append(errs, err)
		case <-timeout.C:
			return errors.Join(errs...)
		}
	}
	select {
	case <-ended:
	case <-timeout.C:
	}
	return errors.Join(errs...)
}

// nodeOf names the connection a channel is subscribed on.
func (h *Hub) nodeOf(ctx context.Context, name string) string {
	if !h.sharded {
		return ""
	}
	return h.route.Node(ctx, name)
}

// newShard returns a shard with a new PubSub; it is not started.
func (h *Hub) newShard(ctx context.Context, key string) *shard {
	return &shard{
		key: key, ps: h.open(context.WithoutCancel(ctx), key),
		inflight: map[string]int{}, opened: make(chan struct{}),
	}
}

// start runs the shard's reader and lets other Subscribes use the shard;
// h.mu must be held.
func (h *Hub) start(s *shard) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.started = true
	s.release()
	h.done.Add(1)
	go h.run(ctx, s)
}

// release lets the Subscribes waiting for s to open go on.
func (s *shard) release() {
	s.openOnce.Do(func() { close(s.opened) })
}

// retire takes s out of the hub, stops its reader and closes its
// connection on a goroutine of its own, which Close waits for as it waits
// for the others; h.mu must be held and the hub not closed. go-redis's
// PubSub.Close waits for a dial in progress on it (a rehome's SSUBSCRIBE
// to a node that does not answer, a reconnect in the reader's
// ReceiveTimeout), which must not hold up the hub.
func (h *Hub) retire(s *shard) {
	delete(h.shards, s.key)
	s.halt()
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		_ = s.closeConn()
	}()
}

// halt stops the reader and releases the Subscribes waiting for s; h.mu
// must be held.
func (s *shard) halt() {
	if s.stop != nil {
		s.stop()
	}
	s.release()
}

// closeConn closes the connection; redis.ErrClosed, for one closed
// already, is no error.
func (s *shard) closeConn() error {
	err := s.ps.Close()
	if errors.Is(err, redis.ErrClosed) {
		return nil
	}
	return err
}

func (h *Hub) subscribe(ctx context.Context, ps Conn, names ...string) error {
	if h.sharded {
		return ps.SSubscribe(ctx, names...)
	}
	return ps.Subscribe(ctx, names...)
}

func (h *Hub) unsubscribe(ctx context.Context, ps Conn, names ...string) error {
	if h.sharded {
		return ps.SUnsubscribe(ctx, names...)
	}
	return ps.Unsubscribe(ctx, names...)
}

// run reads one shard's connection until the shard is closed or replaced.
func (h *Hub) run(ctx context.Context, s *shard) {
	defer h.done.Done()
	pinged := false
	failures := 0
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, healthInterval)
		if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
			return
		}
		var rerr redis.Error
		var nerr net.Error
		switch {
		case err == nil:
			pinged, failures = false, 0
			h.handle(s, msg)
		case errors.As(err, &rerr):
			// An error reply to a subscription. MOVED (or ASK) answers
			// an SSUBSCRIBE sent to a node that no longer serves its
			// slot: that slot's channels move, the others stay. Other
			// refusals (NOPERM) would be refused again: reported, and
			// their waiters wake at the lock's TTL.
			if slot, ok := movedSlot(err); ok && h.sharded {
				h.reconnecting(err)
				h.moveSlot(s, slot)
				continue
			}
			h.refused(s)
			if h.OnError != nil {
				h.OnError(err)
			}
		case errors.As(err, &nerr) && nerr.Timeout():
			if pinged {
				// Connected but silent: a frozen or partitioned server.
				h.reconnecting(err)
				h.reopen(s)
				return
			}
			_ = s.ps.Ping(ctx)
			pinged = true
		case h.sharded:
			// A broken connection: go-redis would resubscribe all its
			// channels with one SSUBSCRIBE, which spans slots. The hub
			// subscribes them again itself, slot by slot.
			h.reconnecting(err)
			h.reopen(s)
			return
		default:
			// go-redis reconnects (and resubscribes) on the next read;
			// do not spin while the server cannot be reached.
			if failures++; failures == 1 {
				h.reconnecting(err)
			}
			h.lost(s)
			h.route.Refresh(ctx)
			if !sleep(ctx, backoff(failures)) {
				return
			}
		}
	}
}

// reconnecting tells OnReconnect that a connection is being opened again.
func (h *Hub) reconnecting(err error) {
	if h.OnReconnect != nil {
		h.OnReconnect(err)
	}
}

// handle dispatches one message from a shard's connection.
func (h *Hub) handle(s *shard, m any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shards[s.key] != s {
		return // replaced: its channels live on the new connection
	}
	switch m := m.(type) {
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			h.confirmed(s, m.Channel)
		case "unsubscribe", "sunsubscribe":
			h.dropped(s, m.Channel)
		}
	case *redis.Message:
		if ch := h.channels[m.Channel]; ch != nil {
			ch.keep(m.Payload)
			if m.Payload == UnlockMessage {
				ch.wakeOne()
			} else {
				ch.wakeCounted(m.Payload)
			}
		}
	}
}

// confirmed handles a subscribe confirmation. One that nobody is waiting
// for is a resubscription after a reconnect, and one for a channel moved to
// a new connection ends a time without a subscription: messages may have
// been lost meanwhile, so every waiter on the channel tries again.
func (h *Hub) confirmed(s *shard, name string) {
	s.retries = 0
	ours := s.inflight[name] > 0
	if ours {
		h.settle(s, name)
		if s.inflight[name] > 0 {
			return // an older SUBSCRIBE; this channel's own is still to come
		}
	}
	ch := h.channels[name]
	if ch == nil || ch.shard != s {
		return
	}
	select {
	case <-ch.ready:
	default:
		close(ch.ready)
	}
	if !ours || ch.moved {
		ch.moved = false
		ch.missed()
		ch.wakeAll()
	}
}

// dropped handles an unsubscribe notice. While a channel has waiters the
// hub does not unsubscribe it, unless an earlier use's UNSUBSCRIBE is
// answered while this use's SUBSCRIBE is still in flight. Otherwise the
// server dropped the subscription: a cluster does so when the channel's
// slot moves to another master. The channels of that slot then move to
// the new owner's connection; the others stay where they are.
func (h *Hub) dropped(s *shard, name string) {
	ch := h.channels[name]
	if ch == nil || ch.shard != s || s.inflight[name] > 0 {
		return
	}
	h.reconnecting(errSlotMoved)
	if !h.sharded {
		h.reopenLocked(s)
		return
	}
	h.moveSlotLocked(s, h.route.Slot(name), 1)
}

// movedSlot reads the slot of a MOVED or ASK error reply.
func movedSlot(err error) (int, bool) {
	f := strings.Fields(err.Error())
	if len(f) < 2 || f[0] != "MOVED" && f[0] != "ASK" {
		return 0, false
	}
	slot, perr := strconv.Atoi(f[1])
	return slot, perr == nil
}

// moveSlot moves the channels of one slot off s to the connection of the
// slot's master, once the routing table was reloaded. Refusals in a row
// (an ASK while the slot migrates, a table that lags) are retried after a
// growing pause.
func (h *Hub) moveSlot(s *shard, slot int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.shards[s.key] != s {
		return
	}
	s.retries = min(s.retries+1, 16)
	h.moveSlotLocked(s, slot, s.retries)
}

// moveSlotLocked is moveSlot with h.mu held. The last channel of s closes
// it.
func (h *Hub) moveSlotLocked(s *shard, slot, retries int) {
	moved := h.detach(s, func(n string) bool { return h.route.Slot(n) == slot })
	if s.channels == 0 {
		h.retire(s)
	}
	h.rehomeLater(moved, retries)
}

// lost forgets the (S)SUBSCRIBE commands in flight on s when its connection
// broke: their answers went with it. go-redis subscribes the channels it
// still has again on the new connection, and that confirmation (no longer
// "ours") makes the channel ready and wakes its waiters. Kept, a count
// would outlive its channel, and the next subscription of that channel
// would take its own confirmation for an older one's and never be ready.
func (h *Hub) lost(s *shard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(s.inflight)
}

// refused forgets the (S)SUBSCRIBE commands in flight on s when one of
// them was refused (NOPERM): the error reply does not say which (Redis 7.0
// names no channel), and the refused channels' confirmations will never
// come. Kept, a refused channel's count would outlive it, and its next
// subscription would take its own confirmation for the refused one's and
// never be ready. The commands still on their way are answered as lost()
// says: their confirmation, no longer "ours", makes the channel ready and
// wakes its waiters once more than needed.
func (h *Hub) refused(s *shard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(s.inflight)
}

// settle records that one (S)SUBSCRIBE of name on s was answered or failed.
func (h *Hub) settle(s *shard, name string) {
	if s.inflight[name]--; s.inflight[name] <= 0 {
		delete(s.inflight, name)
	}
}

// reopen replaces a shard's connection by a new one with the same channels.
func (h *Hub) reopen(s *shard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reopenLocked(s)
}

func (h *Hub) reopenLocked(s *shard) {
	if h.closed || h.shards[s.key] != s {
		return
	}
	h.retire(s)
	if s.channels == 0 {
		return // the next Subscribe opens a new connection
	}
	retries := min(s.retries+1, 16)
	if h.sharded {
		h.rehomeLater(h.detach(s, func(string) bool { return true }), retries)
		return
	}
	ns := h.newShard(h.life, s.key)
	ns.channels = s.channels
	ns.retries = retries
	// Subscribes may send on ns before its reader starts: a classic
	// PubSub connects to the one server whatever it subscribes first.
	ns.release()
	for _, ch := range h.channels {
		if ch.shard == s {
			ch.shard, ch.moved = ns, true
		}
	}
	h.shards[s.key] = ns
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		// Give the server a moment; on error go-redis keeps the channels
		// and resubscribes them when the reader reconnects.
		if sleep(h.life, backoff(retries)) {
			if names := h.pending(ns); len(names) > 0 {
				_ = h.subscribe(h.life, ns.ps, names...)
			}
		}
		h.mu.Lock()
		if h.shards[ns.key] == ns && !ns.started {
			h.start(ns)
		}
		h.mu.Unlock()
	}()
}

// pending returns the channels on ns that still have waiters, to be
// subscribed on it, and counts their SUBSCRIBE as in flight: a channel
// whose last waiter left during the pause is not subscribed again.
func (h *Hub) pending(ns *shard) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	var names []string
	for name, ch := range h.channels {
		if ch.shard == ns && len(ch.waiters) > 0 {
			ns.inflight[name]++
			names = append(names, name)
		}
	}
	return names
}

// detach takes the channels of s that match off it, to be subscribed
// again (on a sharded hub, by rehome); h.mu must be held. Their
// confirmation will wake every waiter: messages may be lost meanwhile.
func (h *Hub) detach(s *shard, match func(name string) bool) []string {
	var names []string
	for name, ch := range h.channels {
		if ch.shard == s && match(name) {
			ch.shard, ch.moved = nil, true
			delete(s.inflight, name)
			s.channels--
			names = append(names, name)
		}
	}
	return names
}

// rehomeLater subscribes channels taken off their connection again, after
// the routing table was reloaded and a pause that grows with retries;
// h.mu must be held.
func (h *Hub) rehomeLater(names []string, retries int) {
	if len(names) == 0 || h.closed {
		return
	}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		h.route.Refresh(h.life)
		if !sleep(h.life, backoff(retries)) {
			return
		}
		nodes := make(map[string]string, len(names))
		for _, n := range names {
			nodes[n] = h.route.Node(h.life, n)
		}
		h.rehome(nodes, retries)
	}()
}

// placement is the channels rehome subscribes on one connection, one
// SSUBSCRIBE per slot.
type placement struct {
	s     *shard // its reader starts, if it has not, once they are sent
	slots [][]string
	err   error
}

// rehome subscribes each channel still waiting for a connection on its
// node's, opening it if need be, with one SSUBSCRIBE per slot. h.mu must
// not be held: the channels are placed under it, but the SSUBSCRIBEs (and
// the dial of a new connection) are sent after it is released, so that
// other waiters need not wait for a node that does not answer. A placed
// channel is the connection's from then on: its confirmation wakes its
// waiters (it was detached as moved). A connection that fails is
// reopened, which moves its channels again after a longer pause.
func (h *Hub) rehome(nodes map[string]string, retries int) {
	h.mu.Lock()
	plan := h.place(nodes, retries)
	h.mu.Unlock()
	for _, p := range plan {
		for _, names := range p.slots {
			if p.err = h.subscribe(h.life, p.s.ps, names...); p.err != nil {
				break
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range plan {
		if h.closed || h.shards[p.s.key] != p.s {
			continue // closed, or emptied and closed meanwhile
		}
		if p.err != nil {
			h.reconnecting(p.err)
			h.reopenLocked(p.s)
		} else if !p.s.started {
			h.start(p.s)
		}
	}
}

// place records each channel of nodes still waiting for a connection on
// its node's, creating the connection (not dialled yet) if need be, and
// returns what to send; h.mu must be held.
func (h *Hub) place(nodes map[string]string, retries int) []*placement {
	if h.closed {
		return nil
	}
	bySlot := map[string]map[int][]string{}
	for name, node := range nodes {
		if ch := h.channels[name]; ch != nil && ch.shard == nil {
			if bySlot[node] == nil {
				bySlot[node] = map[int][]string{}
			}
			slot := h.route.Slot(name)
			bySlot[node][slot] = append(bySlot[node][slot], name)
		}
	}
	var plan []*placement
	for node, slots := range bySlot {
		p := &placement{s: h.shards[node]}
		if p.s == nil {
			p.s = h.newShard(h.life, node)
			p.s.retries = retries
			h.shards[node] = p.s
		}
		for _, names := range slots {
			for _, name := range names {
				h.channels[name].shard = p.s
				p.s.channels++
				p.s.inflight[name]++
			}
			p.slots = append(p.slots, names)
		}
		plan = append(plan, p)
	}
	return plan
}

func backoff(n int) time.Duration {
	return min(25*time.Millisecond<<min(n, 10), maxBackoff)
}

// sleep pauses for d unless ctx ends first; it reports whether it slept.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
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

// wakeCounted wakes every waiter but the counting ones, and as many of
// those as payload says (at least one), longest waiter first.
func (ch *channel) wakeCounted(payload string) {
	n, err := strconv.Atoi(payload)
	if err != nil || n < 1 {
		n = 1
	}
	for _, w := range ch.waiters {
		if w.counts && n == 0 {
			continue
		}
		select {
		case w.wake <- struct{}{}:
			if w.counts {
				n--
			}
		default:
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

// keep gives a message's payload to the channel's listeners.
func (ch *channel) keep(payload string) {
	for _, w := range ch.waiters {
		switch {
		case !w.listens:
		case len(w.msgs) >= maxKept:
			w.gap = true
		default:
			w.msgs = append(w.msgs, payload)
		}
		if w.listens {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// missed tells the channel's listeners that messages may have been lost.
func (ch *channel) missed() {
	for _, w := range ch.waiters {
		w.gap = w.gap || w.listens
	}
}
