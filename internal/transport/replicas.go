package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// Replica sync (WithReplicaSync) narrows the window in which a failover
// loses a write: Redis replicates asynchronously, so a lock or a permit
// written to the master a moment before it fails may be missing on the
// replica that takes over, and another client then gets the same lock or
// permit. After a write the transport sends WAIT on the connection that
// ran the script (pipelined with it, so it waits for exactly that write)
// and, if fewer replicas than asked acknowledged in time, records the
// shortfall, wrapping ErrNotReplicated, in the caller's Check; the caller
// decides what follows (an acquire gives back what it took, any other
// write reports it). As in Redisson (checkLockSyncedSlaves), this is not a
// guarantee: a replica that did not acknowledge can still be promoted, and
// one that did can lose the write if it restarts without persistence.
// Fencing tokens are the remedy for what remains.

// replicaSync is the configuration WithReplicaSync sets (Config).
type replicaSync struct {
	replicas int           // 0: off
	timeout  time.Duration // WAIT's timeout
}

func (r replicaSync) enabled() bool { return r.replicas > 0 }

// maxRedirects bounds how often one try of a synced script follows MOVED
// or ASK.
const maxRedirects = 16

// Check receives the outcome of WAIT for one write, or for one attempt
// that writes to several servers: Run and RunOnce fill it in, possibly
// from several goroutines (a RedLock writes to its nodes at once). A nil
// Check asks for no replica sync.
type Check struct {
	mu  sync.Mutex
	err error // the first shortfall, wrapping ErrNotReplicated
}

// fail records a shortfall; the first one is kept.
func (chk *Check) fail(err error) {
	chk.mu.Lock()
	defer chk.mu.Unlock()
	if chk.err == nil {
		chk.err = err
	}
}

// Reset forgets the shortfall recorded, so that the check receives the
// outcome of the next write alone (a nil check is left as it is).
func (chk *Check) Reset() {
	if chk == nil {
		return
	}
	chk.mu.Lock()
	defer chk.mu.Unlock()
	chk.err = nil
}

// Failed returns the first shortfall recorded, or nil (also for a nil
// check: replica sync is off).
func (chk *Check) Failed() error {
	if chk == nil {
		return nil
	}
	chk.mu.Lock()
	defer chk.mu.Unlock()
	return chk.err
}

// evalSynced runs a script and WAIT in one pipeline on the node that serves
// keys[0], and records in chk whether enough replicas acknowledged. Like
// Run, it tries again while a cluster refuses the script for the moment.
func (t *Transport) evalSynced(ctx context.Context, chk *Check, s *redis.Script, keys []string, args []any) *redis.Cmd {
	deadline := retryDeadline(ctx)
	for pause := firstPause; ; pause = nextPause(pause) {
		cmd := t.runSynced(ctx, chk, false, s, keys, args)
		if !Transient(cmd.Err()) || !again(ctx, pause, deadline) {
			return cmd
		}
	}
}

// runSynced makes one try of evalSynced (once: of RunOnce). The pipeline
// runs on one node's client, which does not follow cluster redirects, so
// runSynced follows MOVED and ASK itself. runWithWait falls back from
// EVALSHA to EVAL on NOSCRIPT (the script cache is empty after a failover
// or SCRIPT FLUSH).
func (t *Transport) runSynced(ctx context.Context, chk *Check, once bool, s *redis.Script, keys []string, args []any) *redis.Cmd {
	node, err := t.nodeFor(ctx, keys[0])
	if err != nil {
		return errCmd(ctx, err)
	}
	asking := false
	for redirects := 0; ; redirects++ {
		cmd, wait := runWithWait(ctx, node, asking, once, s, keys, args, t.replicas)
		if cmd.Err() == nil {
			if err := t.replicas.judge(wait); err != nil {
				chk.fail(err)
			}
			return cmd
		}
		t.Reroute(ctx, cmd.Err())
		cc, ok := t.rdb.(*redis.ClusterClient)
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
// and again with EVAL if the script was not loaded. With once set, the
// script is marked NoRetry, and go-redis then sends no part of the
// pipeline again.
func runWithWait(ctx context.Context, node *redis.Client, asking, once bool, s *redis.Script, keys []string, args []any, r replicaSync) (*redis.Cmd, *redis.IntCmd) {
	run := func(name, script string) (*redis.Cmd, *redis.IntCmd) {
		pipe := node.Pipeline()
		if asking {
			pipe.Do(ctx, "asking")
		}
		cmd := newCmd(ctx, name, script, keys, args, nil)
		if once {
			_ = pipe.Process(ctx, onceCmd{cmd})
		} else {
			_ = pipe.Process(ctx, cmd)
		}
		wait := redis.NewIntCmd(ctx, "wait", r.replicas, r.timeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx) // errors are on the commands
		return cmd, wait
	}
	cmd, wait := run("evalsha", s.Hash())
	if src := scripts.Source(s); src != "" && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run("eval", src)
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
func (t *Transport) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch rdb := t.rdb.(type) {
	case *redis.ClusterClient:
		return rdb.MasterForKey(ctx, key)
	case *redis.Client:
		return rdb, nil
	}
	return nil, fmt.Errorf("replica sync is not supported on %T", t.rdb)
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
