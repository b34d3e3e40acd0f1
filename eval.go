package dlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// Every lock script goes through this file, so that what must accompany a
// script is done in one place: retries of refusals a cluster clears by
// itself (retry.go), replica sync after an acquire (replicas.go), counting
// how often the Redis client sent the command, and the one-off latch of a
// force release.

// eval runs a lock script by EVALSHA, falling back to EVAL on NOSCRIPT.
func (c *Client) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd, _ := c.evalCounted(ctx, s, keys, args...)
	return cmd
}

// evalAcquire runs an acquire script; with chk set (WithReplicaSync) it
// waits for replicas on the script's connection and records the outcome in
// chk.
func (c *Client) evalAcquire(ctx context.Context, chk *replicaCheck, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if chk != nil && c.cfg.replicas.enabled() {
		return c.evalSynced(ctx, chk, s, keys, args...)
	}
	return c.eval(ctx, s, keys, args...)
}

// evalCounted is eval that also reports whether the Redis client sent the
// command more than once: go-redis sends a command again on a new
// connection when the reply is lost (a broken connection, a read
// timeout), and the reply it returns then answers the repeat, which may
// find the work already done by the first run.
func (c *Client) evalCounted(ctx context.Context, s *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, resent bool) {
	retryTransient(ctx, func() error {
		sends := new(sendCounter)
		cmd = c.script(ctx, "evalsha", s.Hash(), keys, args, sends)
		if src := scripts.Source(s); src != "" && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			sends = new(sendCounter)
			cmd = c.script(ctx, "eval", src, keys, args, sends)
		}
		// A repeat within any try (go-redis re-sends inside one) may
		// answer for a run whose reply was lost, even if a later try
		// met a refusal that a cluster or a failover clears.
		resent = resent || sends.n.Load() > 1
		c.reroute(ctx, cmd.Err())
		return cmd.Err()
	})
	return cmd, resent
}

// script runs EVALSHA or EVAL (name) of a script (its hash or source) with
// sends as its last argument, through the Client's batcher.
func (c *Client) script(ctx context.Context, name, script string, keys []string, args []any, sends *sendCounter) *redis.Cmd {
	cmdArgs := make([]any, 0, 4+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(append(cmdArgs, args...), sends)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // how a cluster client finds the slot
	}
	c.batch.process(ctx, cmd)
	return cmd
}

// sendCounter is an extra script argument, ignored by the scripts, that
// counts how often the Redis client wrote its command: go-redis encodes an
// encoding.BinaryMarshaler argument each time it writes the command.
type sendCounter struct{ n atomic.Int32 }

func (s *sendCounter) MarshalBinary() ([]byte, error) {
	s.n.Add(1)
	return nil, nil
}

func (s *sendCounter) String() string { return "" }

// forceLatchTTL is how long the latch of a force release outlives a Client
// that could not delete it after the reply (a broken connection): long
// enough for the Redis client's own retries of one command.
const forceLatchTTL = 30 * time.Second

// forceScript runs a force-release script, whose last key is a fresh
// request latch: a command re-sent after a lost reply answers as the first
// run did, rather than deleting a lock another owner took in between. The
// latch is deleted as soon as the answer is in, as Redisson does with its
// unlock latch.
func (c *Client) forceScript(ctx context.Context, s *redis.Script, keys []string, args ...any) (bool, error) {
	n, err := c.eval(ctx, s, keys, append(args, millis(forceLatchTTL))...).Int64()
	if err == nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		c.rdb.Del(dctx, keys[len(keys)-1])
	}
	return n == 1, err
}
