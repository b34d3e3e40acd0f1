package redistest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one server, for injecting
// network faults: latency, lost replies and dropped connections. Point a
// client at Addr instead of the server's address.
type Proxy struct {
	target   string
	listener net.Listener
	wg       sync.WaitGroup // the accept loop and every forwarding goroutine

	latency atomic.Int64 // time.Duration added to every forwarded chunk
	dropArm atomic.Bool  // swallow the next chunk coming from the server
	drops   atomic.Int64 // replies swallowed so far
	delayed atomic.Int64 // chunks being held back by the latency now

	mu     sync.Mutex
	pairs  map[*proxyPair]struct{} // open connection pairs
	closed bool
}

// proxyPair is one client connection and its connection to the target.
type proxyPair struct {
	client, server net.Conn
	once           sync.Once
}

// close closes both connections; the two forwarding goroutines then end.
func (p *proxyPair) close() {
	p.once.Do(func() {
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// NewProxy starts a proxy on a free loopback port that forwards every
// accepted connection to target ("host:port"). The caller must Close it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("redistest: proxy: %w", err)
	}
	p := &Proxy{target: target, listener: ln, pairs: map[*proxyPair]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// NewTestProxy is NewProxy for tests: it fails tb on error and closes the
// proxy when the test ends.
func NewTestProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	return must(tb, p, err)
}

// Addr returns the address clients should connect to.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// SetLatency delays every chunk of data forwarded in either direction by d.
// Zero turns the delay off.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Delayed returns how many chunks the latency holds back now: a test
// sees that data is on its way before it changes the latency.
func (p *Proxy) Delayed() int { return int(p.delayed.Load()) }

// DropNextReply arms the proxy to lose one reply: the next data that comes
// back from the server, on any connection, is discarded and that
// connection is closed at once. The server did execute the command, but the
// client never sees the reply; go-redis then retries on a new connection.
func (p *Proxy) DropNextReply() { p.dropArm.Store(true) }

// Drops returns how many replies DropNextReply has made the proxy discard.
func (p *Proxy) Drops() int { return int(p.drops.Load()) }

// CloseAll closes all current connections, both the client and the server
// side. The proxy keeps accepting new ones.
func (p *Proxy) CloseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pair := range p.pairs {
		pair.close()
	}
}

// Close stops accepting, closes all connections and waits until all of the
// proxy's goroutines have ended. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.listener.Close()
	p.CloseAll()
	p.wg.Wait()
	return err
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		pair := &proxyPair{client: client, server: server}
		if !p.add(pair) {
			pair.close()
			return
		}
		p.wg.Add(2)
		go p.forward(pair, client, server, false)
		go p.forward(pair, server, client, true)
	}
}

// add registers pair unless the proxy is closed.
func (p *Proxy) add(pair *proxyPair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.pairs[pair] = struct{}{}
	return true
}

// forward copies from src to dst, applying latency and, for replies, an
// armed drop. When either side fails it closes the pair, which also ends
// the goroutine copying the other way.
func (p *Proxy) forward(pair *proxyPair, src, dst net.Conn, replies bool) {
	defer p.wg.Done()
	defer func() {
		pair.close()
		p.mu.Lock()
		delete(p.pairs, pair)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if replies && p.dropArm.CompareAndSwap(true, false) {
				p.drops.Add(1)
				return
			}
			if d := time.Duration(p.latency.Load()); d > 0 {
				p.delayed.Add(1)
				time.Sleep(d)
				p.delayed.Add(-1)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
