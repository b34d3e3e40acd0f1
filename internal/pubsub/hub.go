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
// only on the nodes of the shard that owns the channel's hash slot, and keeps
// one connection per slot: go-redis resubscribes every channel of a
// connection with one SSUBSCRIBE after a reconnect, which a cluster refuses
// (CROSSSLOT) when the channels span slots. When a slot moves (a reshard or
// a failover) the cluster drops its subscribers with an unsolicited
// SUNSUBSCRIBE; the hub then reopens the slot's connection on the new owner
// and wakes every waiter.
//
// Each connection has a reader goroutine that also checks its health: when
// nothing arrives for a while it sends PING, and when the PING goes
// unanswered (a frozen server) it reopens the connection. Network errors are
// left to go-redis, which reconnects and resubscribes.
package pubsub

import (
	"context"
	"errors"
	"net"
	"strconv"
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

// Hub multiplexes waiters over shared subscriptions.
type Hub struct {
	open    func(ctx context.Context) Conn
	sharded bool
	shardOf func(channel string) string
	refresh func(ctx context.Context)

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

// shard is one subscription connection and its bookkeeping. All fields but
// ps and stop are guarded by the hub's mutex.
type shard struct {
	key  string
	ps   Conn
	stop context.CancelFunc // ends the reader

	// inflight counts (S)SUBSCRIBE commands sent on this connection whose
	// confirmation has not arrived yet, per channel.
	inflight map[string]int
	// channels is how many channels are subscribed on this shard.
	channels int
	// retries counts reopenings since the last confirmation, for backoff.
	retries int
}

type channel struct {
	shard   *shard
	ready   chan struct{} // closed once the subscription is confirmed
	waiters []*Waiter     // FIFO: unlock messages go to the longest waiter
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
	return newHub(open, false, func(string) string { return "" }, func(context.Context) {})
}

// NewSharded returns a hub that uses SSUBSCRIBE with one connection per
// shard: shardOf names a channel's shard (its cluster hash slot). open must
// return a PubSub without channels that connects, on the first SSUBSCRIBE,
// to the node serving that channel (redis.ClusterClient.SSubscribe does).
// refresh is called before a shard is reached again after its node failed
// or dropped it, to have the routing table reloaded.
func NewSharded(open func(ctx context.Context) Conn, shardOf func(channel string) string, refresh func(ctx context.Context)) *Hub {
	return newHub(open, true, shardOf, refresh)
}

func newHub(open func(ctx context.Context) Conn, sharded bool, shardOf func(string) string, refresh func(context.Context)) *Hub {
	return &Hub{
		open: open, sharded: sharded, shardOf: shardOf, refresh: refresh,
		shards: map[string]*shard{}, channels: map[string]*channel{},
	}
}

// Subscribe registers a waiter on the named channel. The subscription is
// sent before it returns; Ready is closed when Redis has confirmed it, after
// which no message on the channel can be missed while the connection stays
// up.
func (h *Hub) Subscribe(ctx context.Context, name string) (*Waiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	ch := h.channels[name]
	if ch == nil {
		key := h.shardOf(name)
		s := h.shards[key]
		fresh := s == nil
		if fresh {
			s = h.newShard(ctx, key)
		}
		s.inflight[name]++
		if err := h.subscribe(ctx, s.ps, name); err != nil {
			h.settle(s, name)
			if fresh {
				_ = s.close()
			} else {
				// go-redis keeps the channel even when the command
				// failed, and would subscribe it after a reconnect.
				_ = h.unsubscribe(context.WithoutCancel(ctx), s.ps, name)
			}
			return nil, err
		}
		if fresh {
			// The reader starts only now: a go-redis cluster PubSub picks
			// its node by the channels it has when it first connects.
			h.shards[key] = s
			h.start(s, nil, 0)
		}
		ch = &channel{shard: s, ready: make(chan struct{})}
		s.channels++
		h.channels[name] = ch
	}
	w := &Waiter{hub: h, name: name, ready: ch.ready, wake: make(chan struct{}, 1)}
	ch.waiters = append(ch.waiters, w)
	return w, nil
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
	if len(ch.waiters) > 0 {
		return
	}
	delete(h.channels, w.name)
	s := ch.shard
	s.channels--
	if h.closed || h.shards[s.key] != s {
		return
	}
	if h.sharded && s.channels == 0 {
		delete(h.shards, s.key)
		s.close()
		return
	}
	// The reply is read by the reader; an error here means the connection
	// is down, and go-redis forgets the channel too.
	_ = h.unsubscribe(context.Background(), s.ps, w.name)
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

// Close closes every connection and wakes every waiter.
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
	var errs []error
	for _, s := range h.shards {
		errs = append(errs, s.close())
	}
	h.shards = map[string]*shard{}
	h.mu.Unlock()
	h.done.Wait()
	return errors.Join(errs...)
}

// newShard returns a shard with a new PubSub; it is not started.
func (h *Hub) newShard(ctx context.Context, key string) *shard {
	return &shard{key: key, ps: h.open(context.WithoutCancel(ctx)), inflight: map[string]int{}}
}

// start runs the shard's reader. h.mu must be held.
func (h *Hub) start(s *shard, resubscribe []string, retries int) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	h.done.Add(1)
	go h.run(ctx, s, resubscribe, retries)
}

// close stops the reader and closes the connection.
func (s *shard) close() error {
	if s.stop != nil {
		s.stop()
	}
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
// resubscribe are the channels of a reopened shard, subscribed first, and
// retries how often it was reopened without success.
func (h *Hub) run(ctx context.Context, s *shard, resubscribe []string, retries int) {
	defer h.done.Done()
	if retries > 0 {
		// The shard's node failed or gave the slot away; give the
		// routing table a moment to learn the new owner.
		h.refresh(ctx)
		if !sleep(ctx, backoff(retries)) {
			return
		}
	}
	if len(resubscribe) > 0 {
		// On error go-redis keeps the channels and resubscribes them when
		// the reader below reconnects.
		_ = h.subscribe(ctx, s.ps, resubscribe...)
	}
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
			// An error reply to a subscription, such as MOVED for an
			// SSUBSCRIBE sent to a node that no longer serves the slot.
			if h.sharded {
				h.reconnecting(err)
				h.reopen(s)
				return
			}
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
		default:
			// go-redis reconnects (and resubscribes) on the next read;
			// do not spin while the server cannot be reached.
			if failures++; failures == 1 {
				h.reconnecting(err)
			}
			h.lost(s)
			h.refresh(ctx)
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
// slot moves to another shard. The shard's connection then moves to the
// new owner.
func (h *Hub) dropped(s *shard, name string) {
	ch := h.channels[name]
	if ch == nil || ch.shard != s || s.inflight[name] > 0 {
		return
	}
	h.reconnecting(errSlotMoved)
	h.reopenLocked(s)
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
	_ = s.close()
	delete(h.shards, s.key)
	if s.channels == 0 {
		return // the next Subscribe opens a new connection
	}
	ns := h.newShard(context.Background(), s.key)
	ns.channels = s.channels
	ns.retries = min(s.retries+1, 16)
	var names []string
	for name, ch := range h.channels {
		if ch.shard == s {
			ch.shard, ch.moved = ns, true
			ns.inflight[name]++
			names = append(names, name)
		}
	}
	h.shards[s.key] = ns
	h.start(ns, names, ns.retries)
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
