// Package transport runs dlock's Lua scripts on Redis, for every primitive
// alike (the lock kinds and the synchronizers). It knows nothing of locks:
// it owns what must accompany a script whatever the script does, so that
// it is done in one place. That is EVALSHA with an EVAL fallback on
// NOSCRIPT, counting how often the Redis client sent a command (a repeat
// may answer for a run whose reply was lost), sending a script that must
// not run twice at most once, retrying refusals a cluster or a failover
// clears by itself (retry.go), batching the scripts of concurrent callers
// (batch.go) and sending them for callers that must be free to leave when
// their ctx ends (leave.go), the gate that stops dialling while Redis cannot be reached
// (reach.go) and waiting for replicas after a write (replicas.go).
//
// A Transport is made once per dlock Client and owns its state; the Client
// keeps one field for it.
package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/workers"
	"github.com/redis/go-redis/v9"
)

// Errors a caller of the transport may meet; dlock's root package exports
// the same values under the same names.
var (
	// ErrUnreachable wraps the error of a script not sent because the
	// gate is shut, and of one whose dial failed (Gate).
	ErrUnreachable = errors.New("dlock: redis unreachable")
	// ErrNotReplicated wraps a replica shortfall after a write (Check).
	ErrNotReplicated = errors.New("dlock: write not replicated")
	// ErrNoReply wraps the error of a script sent at most once (RunOnce)
	// whose reply was lost: Redis may or may not have run it.
	ErrNoReply = errors.New("dlock: no reply; the operation may or may not have been applied")
)

// Config is what a Transport needs from the Client's options.
type Config struct {
	// Replicas and ReplicaTimeout are WithReplicaSync's: after a write,
	// WAIT for Replicas replicas for at most ReplicaTimeout; 0 replicas
	// is off. The Client validates them.
	Replicas       int
	ReplicaTimeout time.Duration
	// Deadlines is set when the Redis client ends every request by its
	// ctx's deadline (go-redis ContextTimeoutEnabled): the batcher then
	// sends scripts whose ctx has a deadline alone (batch.go).
	Deadlines bool
}

// Transport runs scripts on one Redis deployment (a plain, Sentinel or
// cluster client) for one dlock Client. It is safe for concurrent use.
type Transport struct {
	rdb      redis.UniversalClient
	replicas replicaSync
	batch    batcher
	gate     *Gate
}

// New returns the Transport of rdb. Close stops the gate's prober.
func New(rdb redis.UniversalClient, cfg Config) *Transport {
	_, cluster := rdb.(*redis.ClusterClient)
	return &Transport{
		rdb:      rdb,
		replicas: replicaSync{replicas: cfg.Replicas, timeout: cfg.ReplicaTimeout},
		batch:    batcher{rdb: rdb, off: cluster, deadlines: cfg.Deadlines, helpers: workers.New(maxIdleHelpers)},
		gate:     newGate(rdb),
	}
}

// Close stops the gate's prober and ends the waits on the gate.
func (t *Transport) Close() {
	t.gate.close()
	t.batch.helpers.Close()
}

// Gate returns the gate on Redis being reachable (reach.go).
func (t *Transport) Gate() *Gate { return t.gate }

// Synced reports whether writes wait for replicas (WithReplicaSync).
func (t *Transport) Synced() bool { return t.replicas.enabled() }

// Run runs s, a script that is safe to run twice, by EVALSHA, falling
// back to EVAL on NOSCRIPT, through the batcher, and tries it again while
// a cluster or a failover refuses it for the moment (retry.go). It reports
// whether the Redis client sent the command more than once: go-redis sends
// a command again on a new connection when the reply is lost (a broken
// connection, a read timeout), and the reply it returns then answers the
// repeat, which may find the work already done by the first run.
//
// With chk set and replica sync on, s is a write whose replication
// matters: it runs alone with WAIT behind it on its connection
// (replicas.go), and a shortfall is recorded in chk; such a run does not
// count sends.
//
// Run calls the batcher itself, with no layer per try in between, so that
// the path from a lock call to go-redis stays short.
func (t *Transport) Run(ctx context.Context, chk *Check, s *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, resent bool) {
	if chk != nil && t.replicas.enabled() {
		return t.evalSynced(ctx, chk, s, keys, args), false
	}
	l := leaving(ctx) // a caller that may leave (leave.go) sends nothing itself
	if t.batch.off {
		l = nil
	}
	deadline := retryDeadline(ctx)
	for pause := firstPause; ; pause = nextPause(pause) {
		sends := new(sendCounter)
		cmd = newCmd(ctx, "evalsha", s.Hash(), keys, args, sends)
		if l != nil {
			l.pending = t.batch.processLeaving(ctx, cmd)
		} else {
			t.batch.process(ctx, cmd)
		}
		// cmd is not the caller's to read while it is still on the wire
		// (l.Pending), so Pending is asked before cmd.Err.
		if l.Pending() == nil {
			if src := noScript(cmd.Err(), s); src != "" {
				sends = new(sendCounter)
				cmd = newCmd(ctx, "eval", src, keys, args, sends)
				if l != nil {
					l.pending = t.batch.processLeaving(ctx, cmd)
				} else {
					t.batch.process(ctx, cmd)
				}
			}
		}
		if l.Pending() != nil { // left on the wire: cmd is not ours to read
			return errCmd(ctx, ctx.Err()), resent
		}
		// A repeat within any try (go-redis re-sends inside one) may
		// answer for a run whose reply was lost, even if a later try
		// met a refusal that a cluster or a failover clears.
		resent = resent || sends.n.Load() > 1
		t.Reroute(ctx, cmd.Err())
		if !Transient(cmd.Err()) || !again(ctx, pause, deadline) {
			return cmd, resent
		}
	}
}

// RunOnce runs s, a script that must not run twice (it takes or gives
// permits, counts down), so that it runs at most once: go-redis must not
// send it again (NoRetry) and neither does RunOnce, except after a dial
// that failed or a pool that had no connection, which sent nothing, and
// after refusals that say the script did not run (Transient). A lost reply
// is reported as an error wrapping ErrNoReply. Such a script is never
// batched: go-redis writes a pipeline again whole, and a pipeline holding
// a command that must not be re-sent is not retried at all, which would
// take go-redis's retries from the scripts batched with it. With chk set
// and replica sync on, WAIT follows as in Run. A dial that failed shuts
// the reach gate (Gate.Saw) and ends the tries with an error wrapping
// ErrUnreachable: an outage is waited out at the gate, not by dialling
// again and again (each failed dial counts against go-redis's breaker).
func (t *Transport) RunOnce(ctx context.Context, chk *Check, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	synced := chk != nil && t.replicas.enabled()
	deadline := retryDeadline(ctx)
	for pause := firstPause; ; pause = nextPause(pause) {
		var cmd *redis.Cmd
		if synced {
			cmd = t.runSynced(ctx, chk, true, s, keys, args)
		} else {
			cmd = t.evalOnce(ctx, s, keys, args)
		}
		err := cmd.Err()
		if ctx.Err() == nil {
			t.Reroute(ctx, err)
		}
		if NotSent(err) {
			if gerr := t.gate.Saw(err); t.gate.Err() != nil {
				if !errors.Is(gerr, ErrUnreachable) { // a pool timeout while the gate is shut
					gerr = t.gate.Err()
				}
				cmd.SetErr(gerr)
				return cmd
			}
		}
		if !(Transient(err) || NotSent(err)) || !again(ctx, pause, deadline) {
			if err != nil && !isReply(err) && !NotSent(err) && !errors.Is(err, ErrUnreachable) {
				cmd.SetErr(fmt.Errorf("%w: %w", ErrNoReply, err))
			}
			return cmd
		}
	}
}

// Call runs s for a caller that must not dial while Redis is unreachable
// (the synchronizers): while the gate is shut it fails at once with an
// error wrapping ErrUnreachable, and a failed dial shuts it (Gate.Saw).
// once selects RunOnce over Run; chk is as there.
func (t *Transport) Call(ctx context.Context, chk *Check, once bool, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := t.gate.Err(); err != nil {
		return errCmd(ctx, err)
	}
	var cmd *redis.Cmd
	if once {
		cmd = t.RunOnce(ctx, chk, s, keys, args...)
	} else {
		cmd, _ = t.Run(ctx, chk, s, keys, args...)
	}
	if err := t.gate.Saw(cmd.Err()); err != cmd.Err() {
		cmd.SetErr(err)
	}
	return cmd
}

// onceCmd is a command go-redis must not send again on its own.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// evalOnce makes one try of RunOnce: EVALSHA, and EVAL when the server
// does not have the script (NOSCRIPT: nothing ran), each sent at most once.
func (t *Transport) evalOnce(ctx context.Context, s *redis.Script, keys []string, args []any) *redis.Cmd {
	cmd := newCmd(ctx, "evalsha", s.Hash(), keys, args, nil)
	_ = t.rdb.Process(ctx, onceCmd{cmd})
	if src := scripts.Source(s); src != "" && (errors.Is(cmd.Err(), redis.ErrNoScript) || redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT")) {
		cmd = newCmd(ctx, "eval", src, keys, args, nil)
		_ = t.rdb.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

// noScript returns the source of s when err is Redis's NOSCRIPT refusal
// of its EVALSHA, else "". A nil err, the common case, costs nothing:
// go-redis's HasErrorPrefix allocates whatever err is.
func noScript(err error, s *redis.Script) string {
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return ""
	}
	return scripts.Source(s)
}

// newCmd returns EVALSHA or EVAL (name) of a script (its hash or source),
// with sends, when not nil, as its last argument. name is typed any so
// that the constant the callers pass needs no allocation.
func newCmd(ctx context.Context, name any, script string, keys []string, args []any, sends *sendCounter) *redis.Cmd {
	cmdArgs := make([]any, 0, 4+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	if sends != nil {
		cmdArgs = append(cmdArgs, sends)
	}
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // how a cluster client finds the slot
	}
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

// Counted reports whether cmd is a script that Run sent (its last
// argument counts its sends): for tests that tell Run's scripts apart.
func Counted(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) == 0 {
		return false
	}
	_, ok := a[len(a)-1].(*sendCounter)
	return ok
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// isReply reports an error that Redis sent as its answer.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}
