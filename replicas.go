package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replica sync (WithReplicaSync) narrows the window in which a failover
// loses a lock: Redis replicates asynchronously, so a lock written to the
// master a moment before it fails may be missing on the replica that takes
// over, and another client then gets the same lock. After an acquire attempt
// the Client sends WAIT on the connection that ran the script (pipelined
// with it, so it waits for exactly that write) and, if fewer replicas than
// asked acknowledged in time, releases what the attempt took and reports
// ErrNotReplicated. As in Redisson (checkLockSyncedSlaves), this is not a
// guarantee: a replica that did not acknowledge can still be promoted, and
// one that did can lose the write if it restarts without persistence.
// Fencing tokens are the remedy for what remains.

// replicaSync is the configuration WithReplicaSync sets.
type replicaSync struct {
	replicas int           // 0: off
	timeout  time.Duration // WAIT's timeout
}

func (r replicaSync) enabled() bool { return r.replicas > 0 }

// maxRedirects bounds how often one try of a synced script follows MOVED
// or ASK.
const maxRedirects = 16

func (r replicaSync) validate() error {
	switch {
	case r.replicas < 0 || r.replicas > 64:
		return fmt.Errorf("%w: replica sync count %d is outside [0, 64]", ErrInvalidOption, r.replicas)
	case r.enabled() && (r.timeout < time.Millisecond || r.timeout > time.Minute):
		return fmt.Errorf("%w: replica sync timeout %v is outside [1ms, 1m]", ErrInvalidOption, r.timeout)
	}
	return nil
}

// check rejects replica sync on clients it cannot work with: WAIT must run
// on the script's connection, which needs a node client (a plain or
// Sentinel client, or a cluster's node), and the pipeline that carries it
// must not time out before WAIT does.
func (r replicaSync) check(rdb redis.UniversalClient) error {
	if !r.enabled() {
		return nil
	}
	var readTimeout time.Duration
	switch rdb := rdb.(type) {
	case *redis.Client:
		readTimeout = rdb.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = rdb.Options().ReadTimeout
	default:
		return fmt.Errorf("%w: replica sync needs a *redis.Client (plain or Sentinel) or a *redis.ClusterClient, not %T", ErrInvalidOption, rdb)
	}
	if readTimeout > 0 && r.timeout >= readTimeout {
		return fmt.Errorf("%w: replica sync timeout %v must be shorter than the Redis client's read timeout %v", ErrInvalidOption, r.timeout, readTimeout)
	}
	return nil
}

// replicaCheck receives the outcome of WAIT for one acquire attempt. The
// engine puts one into the attempt's request; evalAcquire fills it in,
// possibly from several goroutines (a RedLock writes to its nodes at once).
type replicaCheck struct {
	mu  sync.Mutex
	err error // the first shortfall, wrapping ErrNotReplicated
}

// fail records a shortfall; the first one is kept.
func (chk *replicaCheck) fail(err error) {
	chk.mu.Lock()
	defer chk.mu.Unlock()
	if chk.err == nil {
		chk.err = err
	}
}

// failed returns the first shortfall recorded, or nil (also for a nil
// check: replica sync is off).
func (chk *replicaCheck) failed() error {
	if chk == nil {
		return nil
	}
	chk.mu.Lock()
	defer chk.mu.Unlock()
	return chk.err
}

// evalSynced runs a script and WAIT in one pipeline on the node that serves
// keys[0], and records in chk whether enough replicas acknowledged. Like
// eval, it tries again while a cluster refuses the script for the moment.
func (c *Client) evalSynced(ctx context.Context, chk *replicaCheck, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	retryTransient(ctx, func() error {
		cmd = c.runSynced(ctx, chk, s, keys, args)
		return cmd.Err()
	})
	return cmd
}

// runSynced makes one try of evalSynced. The pipeline runs on one node's
// client, which does not follow cluster redirects, so runSynced follows
// MOVED and ASK itself. runWithWait falls back from EVALSHA to EVAL on
// NOSCRIPT (the script cache is empty after a failover or SCRIPT FLUSH).
func (c *Client) runSynced(ctx context.Context, chk *replicaCheck, s *redis.Script, keys []string, args []any) *redis.Cmd {
	node, err := c.nodeFor(ctx, keys[0])
	if err != nil {
		return errCmd(ctx, err)
	}
	asking := false
	for redirects := 0; ; redirects++ {
		cmd, wait := runWithWait(ctx, node, asking, s, keys, args, c.cfg.replicas)
		if cmd.Err() == nil {
			if err := c.cfg.replicas.judge(wait); err != nil {
				chk.fail(err)
			}
			return cmd
		}
		c.reroute(ctx, cmd.Err())
		cc, ok := c.rdb.(*redis.ClusterClient)
		moved, isMoved := redis.IsMovedError(cmd.Err())
		ask, isAsk := redis.IsAskError(cmd.Err())
		if !ok || !(isMoved || isAsk) || redirects == maxRedirects {
			return cmd
		}
		addr := moved
		if isAsk {
			addr = ask
		} else {
			cc.ReloadState(ctx)
		}
		if node, err = nodeAt(ctx, cc, addr); err != nil {
			return cmd
		}
		asking = isAsk
	}
}

// runWithWait pipelines [ASKING,] EVALSHA and WAIT on node's connection,
// and again with EVAL if the script was not loaded.
func runWithWait(ctx context.Context, node *redis.Client, asking bool, s *redis.Script, keys []string, args []any, r replicaSync) (*redis.Cmd, *redis.IntCmd) {
	run := func(eval func(pipe redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.IntCmd) {
		pipe := node.Pipeline()
		if asking {
			pipe.Do(ctx, "asking")
		}
		cmd := eval(pipe)
		wait := redis.NewIntCmd(ctx, "wait", r.replicas, r.timeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx) // errors are on the commands
		return cmd, wait
	}
	cmd, wait := run(func(pipe redis.Pipeliner) *redis.Cmd { return s.EvalSha(ctx, pipe, keys, args...) })
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run(func(pipe redis.Pipeliner) *redis.Cmd { return s.Eval(ctx, pipe, keys, args...) })
	}
	return cmd, wait
}

// judge turns WAIT's reply into the check's outcome.
func (r replicaSync) judge(wait *redis.IntCmd) error {
	n, err := wait.Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT failed: %w", ErrNotReplicated, err)
	case n < int64(r.replicas):
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, r.replicas, r.timeout)
	}
	return nil
}

// nodeFor returns the client of the node that serves key: the master of
// its slot on a cluster, otherwise the client itself (a Sentinel client
// always talks to the current master).
func (c *Client) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		return rdb.MasterForKey(ctx, key)
	case *redis.Client:
		return rdb, nil
	}
	return nil, fmt.Errorf("replica sync is not supported on %T", c.rdb)
}

// nodeAt returns the cluster's client for the node at addr, named by a
// MOVED or ASK reply.
func nodeAt(ctx context.Context, cc *redis.ClusterClient, addr string) (*redis.Client, error) {
	var found *redis.Client
	done := errors.New("found")
	err := cc.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		if strings.EqualFold(node.Options().Addr, addr) {
			found = node
			return done
		}
		return nil
	})
	if found != nil {
		return found, nil
	}
	if err == nil {
		err = fmt.Errorf("no cluster node at %s", addr)
	}
	return nil, err
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
