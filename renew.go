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

// The watchdog visits every hold each interval, the permits of a
// PermitSemaphore too: it renews the lease of a hold taken without
// WithLease, and checks that a hold with a fixed lease is still there, so
// that every hold's loss (a ForceUnlock, an operator's DEL, a Java read
// renewal that shortened a read-write lock, a permit released by its id)
// is noticed within one interval, not at the end of its lease.

// leased is what the Client's one watchdog keeps: a lock's hold or a
// permit of a PermitSemaphore. Each entry names its group and renews its
// group's chunks, so that the watchdog (one ticker, one batching and
// chunking, one deadline per tick) keeps every lease without knowing
// which kind it keeps.
type leased interface {
	// renewGroup names the entries renewed with this one by one script
	// call: the same script, the same lease (renewed, or fixed and only
	// checked), keys in one hash slot.
	renewGroup() string
	// renewChunk renews chunk, entries of this one's group, within ctx
	// (the watchdog's tick). It tells every entry that Redis no longer
	// has that it is lost; an error leaves them all as they are.
	renewChunk(ctx context.Context, chunk []leased) error
}

// keep is the watchdog's renew function: a chunk holds entries of one
// group, so its first entry renews them all.
func keep(ctx context.Context, _ string, chunk []leased) error {
	return chunk[0].renewChunk(ctx, chunk)
}

// entries returns the entries of a chunk as what they are: all of one
// group, so all of one type.
func entries[T leased](chunk []leased) []T {
	out := make([]T, len(chunk))
	for i, e := range chunk {
		out[i] = e.(T)
	}
	return out
}

func (hd *hold) renewGroup() string { return hd.c.renewGroup(hd) }

func (hd *hold) renewChunk(ctx context.Context, chunk []leased) error {
	return hd.c.renew(ctx, "", entries[*hold](chunk))
}

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
	c.observeRenewal(len(holds), start, alive, err)
	if err != nil {
		return fmt.Errorf("dlock: renewing %d locks: %w", len(holds), err)
	}
	if lease > 0 {
		c.holds.renewed(holds, alive, start)
	}
	for i, hd := range holds {
		if !alive[i] {
			hd.lose(fmt.Errorf("%w: %q: the watchdog found it released or taken by another owner", ErrLockLost, hd.kind.lockName()))
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
			keep = max(time.Until(c.holds.deadline(hd)), 0)
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

// renewGroup puts a permit with the others of its semaphore (whose keys
// share a hash slot) and of its lease: renewed, or fixed and checked.
func (p *permit) renewGroup() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.watchdog { // the mode first: a name may end in ":fixed"
		return "psem-fixed:" + p.s.name
	}
	return "psem:" + p.s.name
}

func (p *permit) renewChunk(ctx context.Context, chunk []leased) error {
	return p.s.c.renewPermits(ctx, entries[*permit](chunk))
}

// renewPermits renews permits of one semaphore for the watchdog: those
// without a fixed lease get the watchdog timeout again, those with one
// are checked. A permit being released is left alone, and so is one whose
// lease UpdateLease is setting: it sets it. Each permit's lease mode is
// read here, not when the tick grouped it, since UpdateLease may have
// switched it since.
func (c *Client) renewPermits(ctx context.Context, permits []*permit) error {
	// Within the tick, before claiming the permits (UpdateLease waits for
	// a claim): a renewal sent as Redis comes back keeps them.
	c.drv.Gate().Wait(ctx)
	var claimed, renewed, fixed []*permit
	defer func() {
		for _, p := range claimed {
			p.lease.Unlock()
		}
	}()
	for _, p := range permits {
		if !p.lease.TryLock() {
			continue // UpdateLease sets its lease
		}
		claimed = append(claimed, p)
		p.mu.Lock()
		switch {
		case p.ended || p.releasing:
		case p.watchdog:
			renewed = append(renewed, p)
		default:
			fixed = append(fixed, p)
		}
		p.mu.Unlock()
	}
	if err := c.leasePermits(ctx, c.cfg.watchdogTimeout, renewed); err != nil {
		return err
	}
	return c.leasePermits(ctx, 0, fixed)
}

// leasePermits sets the lease of permits, all of one semaphore, to lease
// from now, or with lease 0 checks that Redis still has them, in one
// script call. A permit Redis no longer has is lost: its context is
// cancelled with cause ErrLockLost.
func (c *Client) leasePermits(ctx context.Context, lease time.Duration, permits []*permit) error {
	if len(permits) == 0 {
		return nil
	}
	s := permits[0].s
	start := time.Now()
	now := nowMillis(start)
	args := []any{now, c.publish, int64(0)} // lease 0: only check
	if lease > 0 {
		args[2] = leaseArg(lease)
	}
	for _, p := range permits {
		args = append(args, p.id)
	}
	held, err := runScript(ctx, c, scripts.PsemLease, s.keys(), args...).Int64Slice()
	if err == nil && len(held) != len(permits) {
		err = fmt.Errorf("unexpected reply %v", held)
	}
	if err != nil {
		c.observeRenewal(len(permits), start, nil, err)
		return fmt.Errorf("dlock: semaphore %q: renewing %d permits: %w", s.name, len(permits), err)
	}
	alive := make([]bool, len(permits)) // a permit being released is not lost
	for i, p := range permits {
		alive[i] = held[i] == 1 || p.isReleased()
	}
	c.observeRenewal(len(permits), start, alive, nil)
	for i, p := range permits {
		switch {
		case held[i] == 1 && lease > 0:
			p.extend(start.Add(lease))
		case !alive[i]:
			p.drop(fmt.Errorf("%w: semaphore %q: the permit was reclaimed or deleted", ErrLockLost, s.name))
		}
	}
	return nil
}
