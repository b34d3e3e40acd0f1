package dlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// renewer renews one kind's holds for the watchdog, many per script call.
type renewer interface {
	// name tells renewers apart in the watchdog's groups.
	name() string
	// renew sets the lease of every hold again and reports, per hold,
	// whether its owner still held the lock.
	renew(ctx context.Context, c *Client, lease time.Duration, holds []*hold) ([]bool, error)
}

// renewGroup puts holds renewed by the same script, and on a cluster in the
// same hash slot, into one group: one script call may touch one slot only.
func (c *Client) renewGroup(hd *hold) string {
	g := hd.kind.renewer().name()
	if c.cluster {
		g += ":" + strconv.Itoa(int(slot(hd.kind.key())))
	}
	return g
}

// renew is the watchdog's renew function. A hold whose owner is no longer
// in Redis is lost, and its holder told; an error leaves every hold as it
// is until the next tick or until its local deadline passes.
func (c *Client) renew(ctx context.Context, _ string, holds []*hold) error {
	start := time.Now()
	alive, err := holds[0].kind.renewer().renew(ctx, c, c.cfg.watchdogTimeout, holds)
	if err != nil {
		return fmt.Errorf("dlock: renewing %d locks: %w", len(holds), err)
	}
	for i, hd := range holds {
		if alive[i] {
			c.renewed(hd, start)
		} else {
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
	res, err := scripts.LockRenew.Run(ctx, c.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(holds) {
		return nil, fmt.Errorf("renewal script answered %d results for %d locks", len(res), len(holds))
	}
	alive := make([]bool, len(res))
	for i, r := range res {
		alive[i] = r == 1
	}
	return alive, nil
}
