package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// CountDownLatch is a count-down latch in Redis with Redisson's
// RCountDownLatch layout: the key name holds the count as a decimal
// integer; the latch is open when the key is missing or holds 0. Setting a
// count publishes 1 and the count reaching 0 publishes 0 on
// redisson_countdownlatch__channel__{name}, so Go and Java (Redisson)
// processes can share one.
//
// A CountDownLatch is safe for concurrent use; its methods fail with
// ErrClosed once its Client is closed.
type CountDownLatch struct {
	c       *Client
	name    string
	channel string
}

// NewCountDownLatch returns the latch called name. It does not touch Redis:
// a latch that was never set is open. The name follows the rules of lock
// names (ErrInvalidName); on a cluster it may not contain a hash tag, since
// Redisson's channel for it would lie in another slot.
func (c *Client) NewCountDownLatch(name string) (*CountDownLatch, error) {
	if err := newSync(c, name); err != nil {
		return nil, err
	}
	channel := layout.LatchChannelPrefix + "{" + name + "}"
	if c.cluster && layout.Slot(channel) != layout.Slot(name) {
		return nil, fmt.Errorf("%w: %q: Redisson's latch channel %q would fall in another cluster slot; use a name without braces", ErrInvalidName, name, channel)
	}
	return &CountDownLatch{c: c, name: name, channel: channel}, nil
}

// Name returns the latch's name, which is also its Redis key.
func (l *CountDownLatch) Name() string { return l.name }

func (l *CountDownLatch) check(ctx context.Context) error {
	if l == nil {
		return syncCheck(nil, ctx, "CountDownLatch")
	}
	return syncCheck(l.c, ctx, "CountDownLatch")
}

// TrySetCount closes the latch with count n (n > 0) if it is open (its key
// does not exist), and reports whether it did. With WithReplicaSync, a
// count too few replicas acknowledged in time stays set: TrySetCount
// reports whether it set it and an error wrapping ErrNotReplicated.
func (l *CountDownLatch) TrySetCount(ctx context.Context, n int) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if n <= 0 {
		return false, fmt.Errorf("%w: latch %q: count %d: the count must be positive", ErrInvalidOption, l.name, n)
	}
	cmd, short := runWrite(ctx, l.c, scripts.LatchTrySet, []string{l.name, l.channel}, n, l.c.publish)
	set, err := cmd.Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("dlock: latch %q: set count: %w", l.name, err)
	case short != nil:
		return set == 1, notReplicated(fmt.Sprintf("latch %q: set count", l.name), short)
	}
	return set == 1, nil
}

// CountDown decrements the count; at 0 the latch opens (its key is
// deleted) and every Await returns. On an open latch it does nothing. It
// returns the count left. With WithReplicaSync, a count-down too few
// replicas acknowledged in time stands: CountDown returns the count left
// and an error wrapping ErrNotReplicated (do not count down again).
func (l *CountDownLatch) CountDown(ctx context.Context) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	// Not cut short by ctx: a count-down the caller believes failed must
	// not have happened.
	cmd, short := runWrite(context.WithoutCancel(ctx), l.c, scripts.LatchCountDown, []string{l.name, l.channel}, l.c.publish)
	n, err := cmd.Int()
	switch {
	case err != nil:
		return 0, fmt.Errorf("dlock: latch %q: count down: %w", l.name, err)
	case short != nil:
		return n, notReplicated(fmt.Sprintf("latch %q: count down", l.name), short)
	}
	return n, nil
}

// Count returns the current count: 0 when the latch is open.
func (l *CountDownLatch) Count(ctx context.Context) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	return l.count(ctx)
}

func (l *CountDownLatch) count(ctx context.Context) (int, error) {
	n, err := l.c.drv.Get(ctx, l.name).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("dlock: latch %q: count: %w", l.name, err)
	}
	return max(n, 0), nil
}

// Await waits until the latch is open (its count is 0), as long as ctx
// allows; it returns at once on an open latch. Waiting is push: Redisson's
// zero message wakes every waiter of every Client, and a waiter also looks
// at the count on any other message and at least every second, so a lost
// message costs a second, never a hang (Redisson would wait forever). When
// ctx ends first the error wraps ctx.Err().
func (l *CountDownLatch) Await(ctx context.Context) (err error) {
	if err := l.check(ctx); err != nil {
		return err
	}
	ob := l.c.observeWait(ctx, LockInfo{Name: l.name, Kind: KindLatch}, nil, OutcomeOpened) // observe.go; nil without observers
	defer func() { ob.returned(err) }()
	// The hub hands a zero message to one waiter of the channel: the
	// Client's waiters on the latch share a latchWait, whose open the
	// first of them to see the latch open closes for the others.
	g := l.c.latches.enter(l.name)
	defer l.c.latches.leave(l.name, g)
	err = acquire(ctx, newSyncWait(l.c, l.channel, g.open, ob, func() (bool, time.Duration, error) {
		select {
		case <-g.open:
			return true, 0, nil
		default:
		}
		n, err := l.count(ctx)
		if err != nil {
			if ctxErr(ctx) != nil {
				return false, 0, nil // wait returns ctx's error
			}
			return false, 0, err
		}
		if n == 0 {
			g.openOnce()
			return true, 0, nil
		}
		return false, 0, nil
	}), false)
	if errors.Is(err, errGaveUp) {
		return fmt.Errorf("dlock: latch %q: await: %w", l.name, ctxErr(ctx))
	}
	return err
}

// Delete deletes the latch, which opens it, and publishes 1 as Redisson
// does (a Redisson waiter then goes on waiting; a dlock waiter returns, the
// latch being open). It reports whether there was a count to delete.
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	n, err := runScript(ctx, l.c, scripts.LatchDelete, []string{l.name, l.channel}, l.c.publish).Int()
	if err != nil {
		return false, fmt.Errorf("dlock: latch %q: delete: %w", l.name, err)
	}
	return n == 1, nil
}

// latchWait is what the waiters of one latch on one Client share: open is
// closed once one of them saw the latch open.
type latchWait struct {
	open    chan struct{}
	once    sync.Once
	waiters int
}

func (g *latchWait) openOnce() { g.once.Do(func() { close(g.open) }) }

// latchWaits is a Client's latchWaits, one per latch with waiters. The zero
// value is ready to use.
type latchWaits struct {
	mu sync.Mutex
	m  map[string]*latchWait
}

// enter returns the latchWait of the latch's current waiters. One that
// was opened is not handed out again: the latch may have been closed since.
func (gs *latchWaits) enter(name string) *latchWait {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[name]
	if g != nil {
		select {
		case <-g.open:
			g = nil
		default:
		}
	}
	if g == nil {
		g = &latchWait{open: make(chan struct{})}
		if gs.m == nil {
			gs.m = map[string]*latchWait{}
		}
		gs.m[name] = g
	}
	g.waiters++
	return g
}

// leave lets go of g, which enter returned for the latch name.
func (gs *latchWaits) leave(name string, g *latchWait) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.waiters--; g.waiters == 0 && gs.m[name] == g {
		delete(gs.m, name)
	}
}
