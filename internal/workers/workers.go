// Package workers keeps goroutines between short jobs: dlock hands an
// attempt (and the transport a send) to another goroutine so that its
// caller can return by its deadline whatever Redis does, and a goroutine
// kept idle between jobs costs less than a new one, whose stack the Redis
// client's deep calls would grow (copy) again at every job.
package workers

import "sync"

// Pool runs jobs on goroutines of its own, keeping up to a bound of them
// idle between jobs. The zero Pool is not usable; make one with New. A
// Pool is safe for concurrent use.
type Pool struct {
	maxIdle int

	mu     sync.Mutex
	idle   []chan func()
	closed bool
}

// New returns a Pool that keeps at most maxIdle goroutines idle.
func New(maxIdle int) *Pool { return &Pool{maxIdle: maxIdle} }

// Run runs f on an idle goroutine of the pool, or on a new one.
func (p *Pool) Run(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w <- f // buffered: never blocks
		return
	}
	p.mu.Unlock()
	w := make(chan func(), 1)
	w <- f
	go p.loop(w)
}

// loop runs the jobs handed to w, idle in between, until the pool is
// closed or enough others are idle.
func (p *Pool) loop(w chan func()) {
	for f := range w {
		f()
		p.mu.Lock()
		if p.closed || len(p.idle) >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
	}
}

// Close ends the idle goroutines; later jobs get goroutines of their own,
// which end with their job.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, w := range p.idle {
		close(w)
	}
	p.idle = nil
}
