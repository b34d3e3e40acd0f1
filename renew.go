package dlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// The watchdog visits every hold each interval: it renews the lease of a
// hold taken without WithLease, and checks that a hold with a fixed lease
// is still there, so that every hold's loss (a ForceUnlock, an operator's
// DEL, a Java read renewal that shortened a read-write lock) is noticed
// within one interval, not at the end of its lease.

// renewer renews one kind's holds for the watchdog, many per script call.
type renewer interface {
	// name tells renewers apart in the watchdog's groups.
	name() string
	// renew sets the lease of every hold again (lease 0: holds with a
	// fixed lease, only checked) and reports, per hold, whether its owner
	// still held the lock.
	renew(ctx context.Context, c *Client, lease time.Duration, holds []*hold) ([]bool, error)
}

// renewGroup puts holds renewed by the same script with the same lease,
// and on a cluster in the same hash slot, into one group: one script call
// may touch one slot only.
func (c *Client) renewGroup(hd *hold) string {
	g := hd.kind.renewer().name()
	if !hd.watchdog {
		g += ":fixed"
	}
	if c.cluster {
		g += ":" + strconv.Itoa(int(layout.Slot(hd.kind.key())))
	}
	return g
}

// renew is the watchdog's renew function. A hold whose owner is no longer
// in Redis is lost, and its holder told; an error leaves every hold as it
// is until the next tick or until its local deadline passes.
func (c *Client) renew(ctx context.Context, _ string, holds []*hold) error {
	start := time.Now()
	lease := c.cfg.watchdogTimeout
	if !holds[0].watchdog {
		lease = 0
	}
	gate := reachGate(c, holds[0].kind)
	gate.Wait(ctx) // within the tick: a renewal sent as Redis comes back keeps the holds
	alive, err := []bool(nil), gate.Err()
	if err == nil {
		alive, err = holds[0].kind.renewer().renew(ctx, c, lease, holds)
		gate.Saw(err)
	}
	c.observeRenewal(holds, start, alive, err)
	if err != nil {
		return fmt.Errorf("dlock: renewing %d locks: %w", len(holds), err)
	}
	for i, hd := range holds {
		switch {
		case alive[i] && hd.watchdog:
			c.renewed(hd, start)
		case alive[i]:
		default:
			c.lose(hd, fmt.Errorf("%w: %q: the watchdog found it released or taken by another owner", ErrLockLost, hd.kind.key()))
		}
	}
	return nil
}

// hashRenewer renews locks whose hash has a field per owner: the plain,
// fair and write locks.
type hashRenewer struct{}

func (hashRenewer) name() string { return "hash" }

func (hashRenewer) renew(ctx context.Context, c *Client, lease time.Duration, holds []*hold) ([]bool, error) {
	keys := make([]string, len(holds))
	args := make([]any, 1, len(holds)+1)
	args[0] = millis(lease)
	for i, hd := range holds {
		keys[i] = hd.kind.key()
		args = append(args, hd.kind.field(hd.owner))
	}
	return runRenewal(ctx, c, scripts.LockRenew, keys, args, len(holds))
}

// readRenewer renews read holds: each one's hold keys, and the lock hash
// for at least as long as the hold lasts.
type readRenewer struct{}

func (readRenewer) name() string { return "rwread" }

func (readRenewer) renew(ctx context.Context, c *Client, lease time.Duration, holds []*hold) ([]bool, error) {
	keys := make([]string, 0, 2*len(holds))
	args := make([]any, 1, 2*len(holds)+1)
	args[0] = millis(lease)
	for _, hd := range holds {
		keep := lease
		if lease == 0 { // a fixed lease: what is left of it
			c.mu.Lock()
			keep = max(time.Until(hd.until), 0)
			c.mu.Unlock()
		}
		keys = append(keys, hd.kind.key(), layout.ReadHoldPrefix(hd.kind.key(), hd.owner))
		args = append(args, hd.owner, millis(keep))
	}
	return runRenewal(ctx, c, scripts.RWReadRenew, keys, args, len(holds))
}

// runRenewal runs a renewal script and reads its reply: per hold, 1 when
// the owner still held the lock.
func runRenewal(ctx context.Context, c *Client, s *redis.Script, keys []string, args []any, n int) ([]bool, error) {
	res, err := c.eval(ctx, s, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != n {
		return nil, fmt.Errorf("renewal script answered %d results for %d locks", len(res), n)
	}
	alive := make([]bool, n)
	for i, r := range res {
		alive[i] = r == 1
	}
	return alive, nil
}
