package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lock scripts are safe to send again (see kind), so the Client retries
// refusals that a cluster or a failover clears by itself; this file holds
// those rules.

// reroute has a cluster client reload its slot map after err, when err is
// not a reply from Redis (a timeout, a refused connection). go-redis
// reloads the map on MOVED, but a master that stops answering sends none:
// without this, commands would go on timing out against it until the
// periodic reload (60s by default), long after the cluster promoted its
// replica.
func (c *Client) reroute(ctx context.Context, err error) {
	var reply redis.Error
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return // the caller gave up; that says nothing about the cluster
	}
	if cc, ok := c.rdb.(*redis.ClusterClient); ok && err != nil && !errors.As(err, &reply) {
		cc.ReloadState(ctx)
	}
}

// transientBudget bounds how long a script a cluster refuses for the moment
// is tried again when ctx has no deadline (Unlock, for one).
const transientBudget = 5 * time.Second

// retryTransient calls run until it returns anything but a transient
// refusal, ctx ends, or, for a ctx without deadline, transientBudget
// passes. Running a lock script again is safe: acquiring twice sets the
// same field, releasing twice finds nothing the second time.
func retryTransient(ctx context.Context, run func() error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(transientBudget)
	}
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		if err := run(); !transient(err) || time.Now().Add(pause).After(deadline) || !sleepCtx(ctx, pause) {
			return
		}
	}
}

// transient reports a refusal that goes away by itself. While a slot
// migrates, a script with several keys of which some are missing (a new
// request latch always is) is refused on both nodes: TRYAGAIN, or ASK from
// the old owner once go-redis has run out of redirects. CLUSTERDOWN lasts
// while a cluster replaces a failed master; READONLY and MASTERDOWN while a
// client still talks to a master that was just demoted or to a replica
// that lost its master; LOADING while a restarted server loads its data.
// go-redis retries these a few times within milliseconds; migrations,
// elections and loads take longer.
func transient(err error) bool {
	if err == nil {
		return false
	}
	_, ask := redis.IsAskError(err)
	_, moved := redis.IsMovedError(err)
	return ask || moved || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) || redis.IsLoadingError(err)
}
