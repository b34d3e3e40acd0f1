package transport

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Scripts that are safe to send again are tried again after refusals that
// a cluster or a failover clears by itself, and a script that must run at
// most once after refusals that say it did not run; this file holds those
// rules.

// Reroute has a cluster client reload its slot map after err, when err is
// not a reply from Redis (a timeout, a refused connection). go-redis
// reloads the map on MOVED, but a master that stops answering sends none:
// without this, commands would go on timing out against it until the
// periodic reload (60s by default), long after the cluster promoted its
// replica.
func (t *Transport) Reroute(ctx context.Context, err error) {
	if err == nil {
		return // the common case, before anything escapes to the heap
	}
	var reply redis.Error
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return // the caller gave up; that says nothing about the cluster
	}
	if cc, ok := t.rdb.(*redis.ClusterClient); ok && err != nil && !errors.As(err, &reply) {
		cc.ReloadState(ctx)
	}
}

// transientBudget bounds how long a script a cluster refuses for the moment
// is tried again when ctx has no deadline (Unlock, for one).
const transientBudget = 5 * time.Second

// The pauses between tries: from firstPause, doubling up to maxPause.
const (
	firstPause = 20 * time.Millisecond
	maxPause   = 500 * time.Millisecond
)

func nextPause(p time.Duration) time.Duration { return min(2*p, maxPause) }

// retryDeadline is when the tries of a refused script stop: ctx's
// deadline, or for a ctx without one, transientBudget from now.
func retryDeadline(ctx context.Context) time.Time {
	if deadline, ok := ctx.Deadline(); ok {
		return deadline
	}
	return time.Now().Add(transientBudget)
}

// again pauses before the next try and reports whether to make it: not
// when the pause would end after deadline, nor when ctx ends first.
func again(ctx context.Context, pause time.Duration, deadline time.Time) bool {
	return !time.Now().Add(pause).After(deadline) && sleep(ctx, pause)
}

// sleep pauses for d unless ctx ends first; it reports whether it slept.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Transient reports a refusal that goes away by itself. While a slot
// migrates, a script with several keys of which some are missing (a new
// request latch always is) is refused on both nodes: TRYAGAIN, or ASK from
// the old owner once go-redis has run out of redirects. CLUSTERDOWN lasts
// while a cluster replaces a failed master; READONLY and MASTERDOWN while a
// client still talks to a master that was just demoted or to a replica
// that lost its master; LOADING while a restarted server loads its data.
// go-redis retries these a few times within milliseconds; migrations,
// elections and loads take longer. Each of them says the script did not
// run.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	_, ask := redis.IsAskError(err)
	_, moved := redis.IsMovedError(err)
	return ask || moved || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) || redis.IsLoadingError(err)
}

// NotSent reports an error that shows the command never left: no
// connection could be made.
func NotSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}
