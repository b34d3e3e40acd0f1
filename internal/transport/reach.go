package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// While Redis cannot be reached, dlock does not dial it from every retry
// loop. go-redis counts the dials of a client's pool that fail, over the
// client's life; once the count reaches PoolSize it fails every later dial
// at once and dials again only once a second until one succeeds. Releases,
// give-backs, attempts and renewals that each dialled through an outage
// would trip that breaker, and a release waiting for it would keep its
// lock taken for up to a second after Redis is back. So a Client that sees
// its connection fail (Gate.Saw) closes a gate: one prober dials Redis
// with the client's own dialer, outside the pool, until a connection
// opens, and then PINGs through the pool, which fails without dialling
// while the breaker is tripped; the gate opens when the PING is answered.
// Meanwhile attempts fail at once with ErrUnreachable, and background
// releases and give-backs wait for the gate, then go at once.

// Probe pauses: short, since the first probe after Redis is back ends
// every wait, and growing, since a long outage needs no more probes.
const (
	minProbePause = 10 * time.Millisecond
	maxProbePause = 100 * time.Millisecond
)

// Gate is a Client's gate on Redis being reachable. The zero Gate stays
// open (Open).
type Gate struct {
	// dial opens a connection to Redis outside the pool; nil (a
	// cluster, whose nodes fail one by one) leaves the gate open.
	dial    func(ctx context.Context) (net.Conn, error)
	ping    func(ctx context.Context) error // through the pool
	idle    func() bool                     // the pool holds idle connections
	timeout time.Duration                   // of one probe
	pinged  time.Time                       // the prober's last PING through the pool
	ctx     context.Context
	cancel  context.CancelFunc // ends probes and waits at Close
	probes  sync.WaitGroup

	mu      sync.Mutex
	last    error         // why Redis is unreachable; nil while the gate is open
	open    chan struct{} // closed when the gate opens again; nil while open
	probing bool          // a prober runs
}

// newGate returns the gate for rdb: one that can close for a
// *redis.Client (plain or Sentinel), one that stays open for a cluster.
func newGate(rdb redis.UniversalClient) *Gate {
	r := &Gate{}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if c, ok := rdb.(*redis.Client); ok {
		opt := c.Options()
		if opt.Dialer != nil {
			r.dial = func(ctx context.Context) (net.Conn, error) { return opt.Dialer(ctx, opt.Network, opt.Addr) }
			r.ping = func(ctx context.Context) error { return c.Ping(ctx).Err() }
			r.idle = func() bool { return c.PoolStats().IdleConns > 0 }
			r.timeout = opt.DialTimeout
			if r.timeout <= 0 {
				r.timeout = 5 * time.Second
			}
		}
	}
	return r
}

// Err returns nil while the gate is open, else an error that wraps
// ErrUnreachable and the latest connection error.
func (r *Gate) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, r.last)
}

// Saw notes the outcome of a command and returns the error to report for
// it: err, wrapped with ErrUnreachable when the dial failed, as the
// commands sent after it will be while the gate stays shut, so that the
// first call that finds Redis unreachable says so as the later ones do. A
// dial that failed closes the gate and starts the prober; a connection
// that broke (Redis may have closed just that one) starts the prober,
// whose first failure closes the gate.
func (r *Gate) Saw(err error) error {
	if r.dial == nil || !ConnectionLost(err) {
		return err
	}
	r.note(err)
	if DialFailed(err) && !errors.Is(err, ErrUnreachable) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

// note starts the prober for a connection error, unless one runs, and
// closes the gate if the dial failed.
func (r *Gate) note(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probing || r.ctx.Err() != nil {
		return
	}
	r.probing = true
	if DialFailed(err) {
		r.shut(err)
	}
	r.probes.Add(1)
	go r.probe()
}

// shut closes the gate with err; r.mu must be held.
func (r *Gate) shut(err error) {
	r.last = err
	if r.open == nil {
		r.open = make(chan struct{})
	}
}

// probe opens the gate once Redis can be reached through the pool again.
// It dials outside the pool until a connection opens, and only then sends
// a PING through the pool: a dial that fails there counts against
// go-redis's breaker, and once the breaker has tripped, the PING fails at
// once, without a dial, until go-redis lets dials through again.
func (r *Gate) probe() {
	defer r.probes.Done()
	for pause := time.Duration(0); ; pause = min(max(2*pause, minProbePause), maxProbePause) {
		if pause > 0 && !sleep(r.ctx, pause) {
			return
		}
		err := r.try()
		r.mu.Lock()
		stop := err == nil || r.ctx.Err() != nil
		switch {
		case err == nil:
			if r.open != nil {
				close(r.open)
			}
			r.last, r.open = nil, nil
		case r.ctx.Err() == nil:
			r.shut(err)
		}
		if stop {
			r.probing = false
		}
		r.mu.Unlock()
		if stop {
			return
		}
	}
}

// try makes one probe and returns why Redis cannot be used, or nil. When
// the dial outside the pool fails, the pool may still have connections
// that work (the Sentinels are down but the master is not, a DialHook
// sends the pool's dials elsewhere, a DNS outage): a PING through the pool
// then opens the gate. The prober sends one when the pool has idle
// connections, which it uses without dialling, and otherwise at most once
// a second, so that its failed dials do not trip go-redis's breaker.
func (r *Gate) try() error {
	ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	defer cancel()
	conn, err := r.dial(ctx)
	if err != nil {
		if r.idle() || time.Since(r.pinged) >= time.Second {
			r.pinged = time.Now()
			if perr := r.ping(ctx); perr == nil || isReply(perr) {
				return nil
			}
		}
		return err
	}
	_ = conn.Close()
	if err := r.ping(ctx); err != nil && !isReply(err) { // LOADING: reachable
		return err
	}
	return nil
}

// Pause waits before sending again a request that failed: while the gate
// is closed, until it opens, and then not at all; while it is open, for
// d. It reports false when ctx ends, the Client closes, or the request
// would go after until.
func (r *Gate) Pause(ctx context.Context, d time.Duration, until time.Time) bool {
	r.mu.Lock()
	open := r.open
	r.mu.Unlock()
	if open == nil {
		return !time.Now().Add(d).After(until) && sleep(ctx, d)
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-open:
		return true
	case <-ctx.Done():
	case <-r.ctx.Done():
	case <-t.C:
	}
	return false
}

// Wait waits until the gate is open; it reports false when ctx ends or
// the Client closes first.
func (r *Gate) Wait(ctx context.Context) bool {
	r.mu.Lock()
	open := r.open
	r.mu.Unlock()
	if open == nil {
		return true
	}
	select {
	case <-open:
		return true
	case <-ctx.Done():
	case <-r.ctx.Done():
	}
	return false
}

// Open is a gate that stays open, for requests that a Client's gate must
// not hold up (RedLock's, whose servers are Clients with gates of their
// own, and a quorum needs only some of them).
var Open = &Gate{}

// close stops the prober and ends the waits in Pause and Wait.
func (r *Gate) close() {
	r.mu.Lock()
	r.cancel()
	r.mu.Unlock()
	r.probes.Wait()
}

// ConnectionLost reports an error of a connection rather than of Redis: a
// dial that failed, a connection that broke or timed out.
func ConnectionLost(err error) bool {
	if err == nil {
		return false // before op escapes: every reply passes here
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// DialFailed reports a connection that could not be opened.
func DialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
