package dlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// DefaultNodeTimeout is how long a RedLock waits at most for each node's
// reply to one request, unless WithNodeTimeout says otherwise. It is
// lowered to a tenth of the lease for shorter leases.
const DefaultNodeTimeout = 100 * time.Millisecond

// redLockRetryDelay is the mean of the random pause between two attempts
// at a RedLock. The pause is random so that competing clients that split
// the nodes between them do not meet again at the same moment.
const redLockRetryDelay = 50 * time.Millisecond

// RedLock is a lock over N independent Redis servers (N odd, usually 3 or
// 5), after the Redlock algorithm: it is held while a quorum of N/2+1
// nodes hold it, so it survives the crash of up to N/2 nodes where a lock
// on one server (or on a failover pair) does not.
//
// On each node the lock is the Mutex's hash with the Mutex's scripts, so
// RedLock is reentrant like Mutex: the lock context Lock returns carries
// the owner, and a Lock with it increments the holds on the nodes.
//
// An attempt sends the acquire script to every node at once, each reply
// bounded by the node timeout (WithNodeTimeout). The lock is taken when a
// quorum accepted within the validity time, lease - elapsed - drift, where
// drift = lease/100 + 2ms allows for the servers' clock rates, all measured
// on the local monotonic clock. Otherwise the attempt is undone on every
// node, including those that seemed to fail, and Lock tries again after a
// random pause until ctx ends.
//
// Without WithLease the lease is the first Client's watchdog timeout and
// that Client's watchdog extends it on every node; the lock context is
// cancelled with cause ErrLockLost once the watchdog finds that fewer than
// a quorum of nodes still hold it, or fails to confirm a quorum before the
// validity time runs out. With WithLease the lock context is cancelled when
// the validity time runs out.
//
// WithFencing gives each acquisition a fencing token that increases across
// owners even though each node counts on its own (see Token and the README's
// safety notes). RedLock assumes bounded clock drift, network delay and
// process pauses; a fencing token at the protected resource is what makes
// it safe when these assumptions fail.
//
// The first Client supplies the configuration (watchdog timeout, logger),
// the owner names and the lock contexts; every Client must talk to a
// different, independent server (not replicas of one another). Do not use
// a RedLock's name for a Mutex on the same servers. A RedLock is safe for
// concurrent use.
type RedLock struct {
	handle
	k *redKind
}

// NewRedLock returns a RedLock called name over the servers of clients, one
// Client per independent server; their number must be odd and at least 3.
// Options: WithLease, WithFencing, WithNodeTimeout.
//
// NewRedLock does not dial. It refuses two Clients on the same go-redis
// client, or on go-redis clients with the same address. A Sentinel failover
// client does not know its servers' addresses before it dials, so for
// Sentinel-backed Clients only the first check applies: making sure that
// each one monitors another master group is up to the caller.
func NewRedLock(clients []*Client, name string, opts ...LockOption) (*RedLock, error) {
	if len(clients) < 3 || len(clients)%2 == 0 {
		return nil, fmt.Errorf("%w: a RedLock needs an odd number of servers, at least 3; got %d", ErrInvalidOption, len(clients))
	}
	nodes := make([]redNode, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("%w: RedLock client %d is nil", ErrInvalidOption, i)
		}
		nodes[i] = redNode{i: i, c: c, addr: clientAddr(c), m: newMutexKind(c, name)}
	}
	if err := distinctServers(clients); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.c.isClosed() {
			return nil, ErrClosed
		}
	}
	h, err := clients[0].newHandle(name, opts, func(name string, cfg lockConfig) (kind, error) {
		if err := cfg.accept("RedLock", optNodeTimeout); err != nil {
			return nil, err
		}
		lease := clients[0].lease(cfg)
		timeout := cfg.nodeTimeout
		switch {
		case timeout == 0:
			timeout = min(DefaultNodeTimeout, lease/10)
		case timeout > lease/10:
			return nil, fmt.Errorf("%w: node timeout %v is more than a tenth of the lease %v", ErrInvalidOption, timeout, lease)
		}
		return &redKind{id: strconv.FormatUint(redLocks.Add(1), 10), name: name, nodes: nodes, quorum: quorum(len(nodes)),
			timeout: max(timeout, time.Millisecond)}, nil
	})
	if err != nil {
		return nil, err
	}
	return &RedLock{handle: h, k: h.kind.(*redKind)}, nil
}

// redLocks numbers RedLocks, so that each one's holds form their own
// watchdog group: a renewal's outcome is decided per RedLock.
var redLocks atomic.Uint64

// redKind is the RedLock kind: the quorum rules over the Mutex scripts of
// every node. The engine sees it as one lock on the first Client.
type redKind struct {
	id      string
	name    string
	nodes   []redNode
	quorum  int
	timeout time.Duration // per node and request
	sent    inflight      // acquire requests still on their way, so releases follow them
}

func (k *redKind) key() string               { return k.name }
func (k *redKind) lockName() string          { return k.name }
func (k *redKind) field(owner string) string { return owner }
func (k *redKind) role() string              { return "redlock" }
func (k *redKind) channel(string) string     { return "" } // independent nodes share no channel: poll
func (k *redKind) renewer() renewer          { return redRenewer{k} }
func (k *redKind) label() string             { return KindRedLock }

// selfGated: the Client's reach gate does not hold up a RedLock's
// requests (kind.go); each node is a Client with a gate of its own.
func (k *redKind) selfGated() {}

// attempt is one Redlock round: the acquire script on every node at once,
// the fencing round if asked, and the validity check. A failed round is
// undone before attempt returns, and its reason names the nodes.
func (k *redKind) attempt(ctx context.Context, r request) (attemptResult, error) {
	start := time.Now()
	n := len(k.nodes)
	failed := make([]*NodeError, n)
	var ok, refused, held, gone int
	var token int64
	// Recorded before any is sent, so that a release issued after this
	// attempt returns waits for each of them, even one not sent yet.
	round := make([]*sentAttempt, n)
	for i := range round {
		round[i] = k.sent.begin(r.owner, i)
	}
	fanOut(ctx, k.nodes, k.timeout, func(ctx context.Context, nd redNode) (res attemptResult, err error) {
		defer func() { k.sent.finish(r.owner, nd.i, round[nd.i], err == nil && res.acquired) }()
		if nd.c.isClosed() {
			return res, ErrClosed
		}
		return nd.m.attempt(ctx, r)
	}, func(i int, res attemptResult, err error) bool {
		switch {
		case err != nil:
			failed[i] = &NodeError{k.nodes[i].addr, err}
			refused++
		case res.lost:
			failed[i] = &NodeError{k.nodes[i].addr, fmt.Errorf("%w: the owner's hold is gone", ErrLockLost)}
			refused++
			gone++
		case !res.acquired:
			failed[i] = &NodeError{k.nodes[i].addr, fmt.Errorf("%w: held by another owner for %v", ErrNotObtained, res.ttl)}
			refused++
			held++
		default:
			token = max(token, res.token)
			ok++
		}
		// A round without a quorum waits for a node that says the lock
		// is held, if any does within the node timeout: whether the
		// lock is busy or the nodes are failing decides the error.
		return ok >= k.quorum || refused > n-k.quorum && held > 0
	})

	var reason error
	if r.reentry && gone > n-k.quorum {
		return attemptResult{lost: true}, nil // no quorum has the hold any more
	}
	if ok < k.quorum {
		reason = k.quorumError("lock", ok, failed)
	} else if r.fence {
		if qe := k.fence(ctx, r.owner, token); qe != nil {
			reason = qe
		}
	}
	if reason == nil {
		elapsed := time.Since(start)
		valid := validity(r.lease)
		if elapsed < valid {
			return attemptResult{acquired: true, token: token}, nil
		}
		reason = fmt.Errorf("redlock: a quorum accepted after %v, past the validity of %v", elapsed, valid)
	}
	if !r.reentry {
		k.undo(ctx, r, round)
	}
	if qe, ok := reason.(*QuorumError); ok && !qe.refused() {
		// No node said the lock is taken: the nodes are down or refuse
		// us (NOPERM), which a Mutex reports as an error too, not as a
		// busy lock to wait for.
		return attemptResult{}, qe
	}
	return attemptResult{ttl: retryDelay(), reason: reason}, nil
}

// fence is the second round of a fenced acquisition. Each node's counter
// was INCRed by the acquire script; token is the maximum among the nodes
// that answered. Raising a quorum of counters to token, while the owner
// holds the lock there, makes every later owner's token larger: its quorum
// shares a node with this one, which it can take only after this owner's
// hold there ended, so its INCR there yields more than token.
func (k *redKind) fence(ctx context.Context, owner string, token int64) *QuorumError {
	failed := make([]*NodeError, len(k.nodes))
	var ok, refused int
	fanOut(ctx, k.nodes, k.timeout, func(ctx context.Context, nd redNode) (int64, error) {
		return nd.c.eval(ctx, scripts.TokenRaise, []string{k.name, nd.m.token()}, owner, token).Int64()
	}, func(i int, held int64, err error) bool {
		switch {
		case err != nil:
			failed[i] = &NodeError{k.nodes[i].addr, err}
			refused++
		case held != 1:
			failed[i] = &NodeError{k.nodes[i].addr, fmt.Errorf("%w: the owner does not hold it here", ErrNotHeld)}
			refused++
		default:
			ok++
		}
		return ok >= k.quorum || refused > len(k.nodes)-k.quorum
	})
	if ok < k.quorum {
		return k.quorumError("fence", ok, failed)
	}
	return nil
}

// undo takes back a failed round of a first acquisition: it is released on
// every node, those that seemed to fail included, since they may have
// taken the lock and lost only the reply. (A failed re-entry took nothing:
// its nodes only set the lease of the owner's hold again.) Each node's
// release waits for the round's request to that node (inflight).
func (k *redKind) undo(ctx context.Context, r request, round []*sentAttempt) {
	ctx = context.WithoutCancel(ctx) // the round may have ended because ctx did
	fanOut(ctx, k.nodes, k.timeout, func(ctx context.Context, nd redNode) (releaseResult, error) {
		ctx, cancel := k.sent.after(ctx, r.owner, nd.i, k.timeout)
		defer cancel()
		return nd.m.release(ctx, r)
	}, func(int, releaseResult, error) bool { return false })
}

// release gives back the owner's hold on every node. The owner held the
// lock if a quorum of nodes had its hold; if more than N - quorum nodes say
// they did not, it did not; otherwise the outcome is unknown and the error
// says why.
func (k *redKind) release(ctx context.Context, r request) (releaseResult, error) {
	n := len(k.nodes)
	failed := make([]*NodeError, n)
	var freed, notHeldN int
	fanOut(ctx, k.nodes, k.timeout, func(ctx context.Context, nd redNode) (releaseResult, error) {
		ctx, cancel := k.sent.after(ctx, r.owner, nd.i, k.timeout)
		defer cancel()
		return nd.m.release(ctx, r)
	}, func(i int, res releaseResult, err error) bool {
		switch {
		case err != nil:
			failed[i] = &NodeError{k.nodes[i].addr, err}
		case res == notHeld:
			failed[i] = &NodeError{k.nodes[i].addr, ErrNotHeld}
			notHeldN++
		default:
			freed++
		}
		return false // release on every node, not just a quorum
	})
	switch {
	case freed >= k.quorum:
		return released, nil
	case notHeldN > n-k.quorum:
		return notHeld, nil
	}
	return 0, k.quorumError("unlock", freed, failed)
}

// forceRelease deletes the lock on every node. Each node's request carries
// its own one-off request latch (mutexKind.forceRelease), so a command
// re-sent after a lost reply does not delete a lock another owner took in
// between.
// It succeeds when a quorum of nodes answered.
func (k *redKind) forceRelease(ctx context.Context) (bool, error) {
	failed := make([]*NodeError, len(k.nodes))
	var answered int
	var deleted bool
	fanOut(ctx, k.nodes, k.timeout, func(ctx context.Context, nd redNode) (bool, error) {
		return nd.m.forceRelease(ctx)
	}, func(i int, d bool, err error) bool {
		if err != nil {
			failed[i] = &NodeError{k.nodes[i].addr, err}
			return false
		}
		answered++
		deleted = deleted || d
		return false
	})
	if answered < k.quorum {
		return deleted, k.quorumError("force unlock", answered, failed)
	}
	return deleted, nil
}

// quorumError builds the QuorumError of a request from the number of
// nodes that carried it out and its per-node failures (nil for nodes that
// succeeded or whose answer was not awaited).
func (k *redKind) quorumError(op string, succeeded int, failed []*NodeError) *QuorumError {
	e := &QuorumError{Op: op, Quorum: k.quorum, Nodes: len(k.nodes), Succeeded: succeeded}
	for _, f := range failed {
		if f != nil {
			e.Failed = append(e.Failed, f)
		}
	}
	return e
}

// retryDelay is a random pause in [d/2, 3d/2) for d = redLockRetryDelay.
func retryDelay() time.Duration {
	return redLockRetryDelay/2 + rand.N(redLockRetryDelay)
}

// redRenewer extends a RedLock's holds on every node for the watchdog.
type redRenewer struct{ k *redKind }

func (r redRenewer) name() string { return "redlock:" + r.k.id }

// renew runs the hash renewal script on every node. A hold is alive when a
// quorum renewed it and lost when more than N - quorum nodes no longer have
// it; when neither can be told (nodes did not answer), renew returns an
// error, so no hold's deadline moves, and the watchdog tries again at its
// next tick, until the validity time runs out.
func (r redRenewer) renew(ctx context.Context, _ *Client, lease time.Duration, holds []*hold) ([]bool, error) {
	k := r.k
	n := len(k.nodes)
	renewedN := make([]int, len(holds))
	goneN := make([]int, len(holds))
	failed := make([]*NodeError, n)
	var answered int
	fanOut(ctx, k.nodes, k.timeout, func(ctx context.Context, nd redNode) ([]bool, error) {
		return hashRenewer{}.renew(ctx, nd.c, lease, holds)
	}, func(i int, alive []bool, err error) bool {
		if err != nil {
			failed[i] = &NodeError{k.nodes[i].addr, err}
			return false
		}
		answered++
		for j, a := range alive {
			if a {
				renewedN[j]++
			} else {
				goneN[j]++
			}
		}
		return false
	})
	alive := make([]bool, len(holds))
	for j := range holds {
		switch {
		case renewedN[j] >= k.quorum:
			alive[j] = true
		case goneN[j] > n-k.quorum:
		default:
			return nil, k.quorumError("renew", answered, failed)
		}
	}
	return alive, nil
}

// IsLocked reports whether a quorum of nodes hold the lock. The error wraps
// a *QuorumError when fewer than a quorum of nodes answered.
func (l *RedLock) IsLocked(ctx context.Context) (bool, error) {
	n, err := l.read(ctx, func(ctx context.Context, nd redNode) (int64, error) {
		return nd.c.drv.Exists(ctx, l.k.name).Result()
	})
	return n > 0, err
}

// HoldCount returns how many holds the owner in ctx has on the lock: the
// number of its Lock calls not yet matched by an Unlock, or 0 when ctx
// carries no owner or a quorum of nodes does not have the owner's hold.
func (l *RedLock) HoldCount(ctx context.Context) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	owner, ok := ownerFrom(ctx, l.c)
	if !ok {
		return 0, nil
	}
	n, err := l.read(ctx, func(ctx context.Context, nd redNode) (int64, error) {
		v, err := nd.c.drv.HGet(ctx, l.k.name, owner).Int64()
		if isNil(err) {
			return 0, nil
		}
		return v, err
	})
	if err != nil || n == 0 {
		return 0, err
	}
	return l.c.holds.count(l.holdKey(owner), int(n)), nil
}

// TTL returns how long the lock's lease has left on a quorum of nodes (the
// longest time that a quorum report at least), or 0 when a quorum does not
// hold it.
func (l *RedLock) TTL(ctx context.Context) (time.Duration, error) {
	n, err := l.read(ctx, func(ctx context.Context, nd redNode) (int64, error) {
		d, err := nd.c.drv.PTTL(ctx, l.k.name).Result()
		return int64(max(d, 0)), err
	})
	return time.Duration(n), err
}

// read asks every node for a number and returns what a quorum agree on at
// least.
func (l *RedLock) read(ctx context.Context, get func(ctx context.Context, nd redNode) (int64, error)) (int64, error) {
	k := l.k
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	vals := make([]int64, len(k.nodes))
	failed := make([]*NodeError, len(k.nodes))
	var answered int
	fanOut(ctx, k.nodes, k.timeout, get, func(i int, v int64, err error) bool {
		if err != nil {
			failed[i] = &NodeError{k.nodes[i].addr, err}
			return false
		}
		vals[i] = v
		answered++
		return false
	})
	if answered < k.quorum {
		return 0, fmt.Errorf("dlock: %q: %w", l.name, k.quorumError("read", answered, failed))
	}
	return quorumValue(vals, k.quorum), nil
}
