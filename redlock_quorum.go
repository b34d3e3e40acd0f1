package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeError is one RedLock node's failure in one request: the node refused
// (the lock is held there by another owner, or the owner no longer holds
// it), did not answer within the node timeout, or answered with an error.
type NodeError struct {
	// Addr is the node's address as its go-redis client knows it.
	Addr string
	// Err is what happened on that node. It wraps ErrNotObtained when
	// another owner holds the lock there, ErrNotHeld when the owner does
	// not, and context.DeadlineExceeded when the node did not answer in time.
	Err error
}

// Error names the node and what happened there.
func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError reports a RedLock request that fewer than a quorum of nodes
// carried out. It names every node that did not, and why. Errors returned
// by RedLock wrap it (find it with errors.As); errors.As also finds each
// *NodeError through it.
//
// A failed Lock or TryLock wraps ErrNotObtained as well only when at least
// one node refused: another owner holds the lock there, or, in the fencing
// round, the owner no longer held it there. Lock then waits and tries
// again. When every node that failed did so with an error (connection
// refused, no answer within the node timeout, NOPERM), the lock is not
// known to be busy: the error wraps the *QuorumError but not
// ErrNotObtained, and Lock returns it at once, as a Mutex returns a Redis
// error.
type QuorumError struct {
	// Op is the request: "lock", "fence", "unlock", "renew", "force unlock"
	// or "read".
	Op string
	// Quorum is how many nodes had to carry it out: N/2+1.
	Quorum int
	// Nodes is how many nodes were asked.
	Nodes int
	// Succeeded is how many nodes carried it out.
	Succeeded int
	// Failed lists the nodes that did not carry it out, in node order.
	// A request stops waiting for answers once its outcome is known (a
	// lock refused by more than Nodes - Quorum nodes), so Failed may
	// name fewer than Nodes - Succeeded nodes: the rest were not awaited.
	Failed []*NodeError
}

// Error says how many nodes succeeded, why each node that failed did, and
// how many answers were not awaited.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock %s: %d of %d nodes succeeded, %d needed", e.Op, e.Succeeded, e.Nodes, e.Quorum)
	for _, f := range e.Failed {
		b.WriteString("; ")
		b.WriteString(f.Error())
	}
	if n := e.Nodes - e.Succeeded - len(e.Failed); n > 0 {
		fmt.Fprintf(&b, "; %d not awaited (the outcome was known)", n)
	}
	return b.String()
}

// refused reports whether some node answered with a refusal (the lock is
// held by another owner, or no longer by this one) rather than failing
// with an error.
func (e *QuorumError) refused() bool {
	for _, f := range e.Failed {
		if errors.Is(f.Err, ErrNotObtained) || errors.Is(f.Err, ErrNotHeld) {
			return true
		}
	}
	return false
}

// Unwrap returns the node errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f
	}
	return errs
}

// redNode is one independent server of a RedLock: its Client and the
// Mutex kind whose scripts run there.
type redNode struct {
	i    int // position among the RedLock's nodes
	c    *Client
	addr string
	m    *mutexKind
}

// quorum is N/2+1: any two quorums of N nodes share a node.
func quorum(n int) int { return n/2 + 1 }

// nodeAnswer is one node's answer to one request.
type nodeAnswer[T any] struct {
	i   int
	v   T
	err error
}

// fanOut sends op to every node at once, each call bounded by timeout, and
// hands the answers to took as they arrive, until took reports that the
// outcome is known or every node has answered or timed out. So a request
// costs what the quorum's slowest node costs, never the sum, and a frozen
// node costs at most timeout.
//
// Each node's call gets a context that ends after timeout, but a go-redis
// client without ContextTimeoutEnabled keeps reading until its own
// ReadTimeout; fanOut does not wait for that: such a node is reported as
// timed out and its late answer is dropped when it comes.
func fanOut[T any](ctx context.Context, nodes []redNode, timeout time.Duration,
	op func(ctx context.Context, n redNode) (T, error), took func(i int, v T, err error) (done bool)) {
	answers := make(chan nodeAnswer[T], len(nodes)) // buffered: late senders never block
	for i, n := range nodes {
		go func() {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			a := nodeAnswer[T]{i: i}
			a.v, a.err = op(nctx, n)
			answers <- a
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	answered := make([]bool, len(nodes))
	// rest reports every node that has not answered with err.
	rest := func(err error) {
		var zero T
		for i := range nodes {
			if !answered[i] && took(i, zero, err) {
				return
			}
		}
	}
	for range nodes {
		select {
		case a := <-answers:
			answered[a.i] = true
			if took(a.i, a.v, a.err) {
				return
			}
		case <-timer.C:
			rest(timedOut(timeout))
			return
		case <-ctx.Done():
			rest(ctx.Err())
			return
		}
	}
}

// timedOut is a node's error when it did not answer within the node timeout.
func timedOut(timeout time.Duration) error {
	return fmt.Errorf("no answer within the node timeout of %v: %w", timeout, context.DeadlineExceeded)
}

// quorumValue returns the largest v such that at least q of vals are >= v:
// what a quorum of nodes agree on at least. Missing answers count as 0.
func quorumValue(vals []int64, q int) int64 {
	s := slices.Clone(vals)
	slices.Sort(s)
	slices.Reverse(s)
	return s[q-1]
}

// failoverAddr is what go-redis puts in Options().Addr of every Sentinel
// failover client: it names no server, since the client asks the sentinels
// for the master's address only when it dials.
const failoverAddr = "FailoverClient"

// serverAddr returns the address of c's servers as its Redis client knows
// them before dialing, or "" when the client does not know them: a
// Sentinel failover client finds its servers only when it dials.
func serverAddr(c *Client) string { return c.drv.Addr() }

// clientAddr names a Client's server in node errors: its address, or for a
// client that does not know it before dialing (Sentinel), its kind and the
// dlock Client's id, so that the nodes of a QuorumError stay apart.
func clientAddr(c *Client) string {
	if a := serverAddr(c); a != "" {
		return a
	}
	if rdb, ok := c.drv.Handle().(*redis.Client); ok && rdb.Options().Addr == failoverAddr {
		return failoverAddr + " " + c.id
	}
	return "client " + c.id
}

// distinctServers refuses a list of Clients of which two surely talk to
// the same server: two that share a go-redis client, or whose go-redis
// clients have the same address. Sentinel failover clients do not say which
// servers they use before they dial (go-redis gives each the address
// "FailoverClient"), so for them only the go-redis client's identity can be
// checked; NewRedLock does not dial to find out more.
func distinctServers(clients []*Client) error {
	rdbs := make(map[any]int, len(clients))
	addrs := make(map[string]int, len(clients))
	for i, c := range clients {
		// New accepts only *redis.Client and *redis.ClusterClient, and
		// dlockrueidis a rueidis.Client, so the handle is a comparable
		// pointer.
		if j, dup := rdbs[c.drv.Handle()]; dup {
			return fmt.Errorf("%w: RedLock clients %d and %d use the same go-redis client", ErrInvalidOption, j, i)
		}
		rdbs[c.drv.Handle()] = i
		a := serverAddr(c)
		if a == "" {
			continue
		}
		if _, dup := addrs[a]; dup {
			return fmt.Errorf("%w: RedLock server %s appears twice", ErrInvalidOption, a)
		}
		addrs[a] = i
	}
	return nil
}
