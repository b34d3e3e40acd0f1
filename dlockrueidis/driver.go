package dlockrueidis

// The rueidis Driver (internal/driver). rueidis pipelines the commands of
// concurrent goroutines on one connection by itself, so scripts go
// straight to Client.Do: no batcher, no goroutine hand-off (rueidis ends a
// request by its ctx), and no re-send accounting, since rueidis never
// sends a script again on its own (it retries read-only commands only).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/driver"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// rdriver is the Driver of one rueidis.Client (standalone, Sentinel or
// cluster).
type rdriver struct {
	c       rueidis.Client
	cluster bool
}

var _ driver.Driver = (*rdriver)(nil)

// The tries of a script refused for the moment (a failover's READONLY or
// LOADING, a cluster's TRYAGAIN): as internal/transport's.
const (
	firstPause      = 20 * time.Millisecond
	maxPause        = 500 * time.Millisecond
	transientBudget = 5 * time.Second
)

// evalsha runs s by EVALSHA, and by EVAL (s.Eval, through d's Scripter)
// when the server does not have it (NOSCRIPT: nothing ran).
func (d *rdriver) evalsha(ctx context.Context, s *redis.Script, keys []string, args []any) *redis.Cmd {
	cmd := toCmd(ctx, d.c.Do(ctx, d.c.B().Evalsha().Sha1(s.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build()))
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = s.Eval(ctx, d, keys, args...)
	}
	return cmd
}

// Run runs s, safe to run twice, trying again while Redis refuses it for
// the moment. rueidis does not re-send a script, so it never reports a
// repeat.
func (d *rdriver) Run(ctx context.Context, _ *transport.Check, s *redis.Script, keys []string, args ...any) (*redis.Cmd, bool) {
	deadline := retryDeadline(ctx)
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		cmd := d.evalsha(ctx, s, keys, args)
		if !transport.Transient(cmd.Err()) || !again(ctx, pause, deadline) {
			return cmd, false
		}
	}
}

// RunOnce runs s, which must not run twice: tried again only after a
// refusal that says it did not run or a dial that failed; a lost reply
// (a broken connection, ctx's end while the reply was due) wraps
// transport.ErrNoReply.
func (d *rdriver) RunOnce(ctx context.Context, _ *transport.Check, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	deadline := retryDeadline(ctx)
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		cmd := d.evalsha(ctx, s, keys, args)
		err := cmd.Err()
		if !(transport.Transient(err) || transport.NotSent(err)) || !again(ctx, pause, deadline) {
			if err != nil && !isReply(err) && !transport.NotSent(err) {
				cmd.SetErr(fmt.Errorf("%w: %w", transport.ErrNoReply, err))
			}
			return cmd
		}
	}
}

func (d *rdriver) Call(ctx context.Context, chk *transport.Check, once bool, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if once {
		return d.RunOnce(ctx, chk, s, keys, args...)
	}
	cmd, _ := d.Run(ctx, chk, s, keys, args...)
	return cmd
}

// Gate stays open: rueidis paces its own reconnects (it has no dial
// breaker for a gate to spare).
func (d *rdriver) Gate() *transport.Gate { return transport.Open }

// Synced is false: New refuses WithReplicaSync.
func (d *rdriver) Synced() bool { return false }

// CanLeave is false: rueidis ends each request by its ctx itself, so a
// script is never left on the wire for a caller that went away.
func (d *rdriver) CanLeave() bool { return false }

// Reroute does nothing: rueidis refreshes a cluster's slots itself.
func (d *rdriver) Reroute(context.Context, error) {}

func (d *rdriver) Cluster() bool   { return d.cluster }
func (d *rdriver) Deadlines() bool { return true }
func (d *rdriver) Handle() any     { return d.c }

// Addr names the nodes rueidis knows (sorted, joined by commas), or "" for
// a Sentinel client, whose master may change.
func (d *rdriver) Addr() string {
	if d.c.Mode() == rueidis.ClientModeSentinel {
		return ""
	}
	addrs := slices.Sorted(maps.Keys(d.c.Nodes()))
	return strings.Join(addrs, ",")
}
func (d *rdriver) Shutdown() {}

// Masters runs fn on the server, or on each master of a cluster,
// concurrently, as the Driver interface says.
func (d *rdriver) Masters(ctx context.Context, fn func(ctx context.Context, m driver.Commands) error) error {
	if !d.cluster {
		return fn(ctx, d)
	}
	nodes := d.c.Nodes()
	errs := make(chan error, len(nodes))
	for addr, node := range nodes {
		go func() { errs <- d.onMaster(ctx, addr, node, fn) }()
	}
	var all []error
	for range nodes {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// onMaster runs fn on node if it is a master.
func (d *rdriver) onMaster(ctx context.Context, addr string, node rueidis.Client, fn func(ctx context.Context, m driver.Commands) error) error {
	role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
	if err != nil {
		return fmt.Errorf("%s: %w", addr, convErr(err))
	}
	if len(role) == 0 {
		return nil
	}
	if r, _ := role[0].ToString(); r != "master" {
		return nil
	}
	return fn(ctx, &rdriver{c: node})
}

// Hub opens the pub/sub hub: classic PUBLISH and SUBSCRIBE on one
// dedicated connection, or on a cluster sharded SPUBLISH and SSUBSCRIBE
// (one connection per master) unless WithShardedPubSub(false).
func (d *rdriver) Hub(sharded *bool, log *slog.Logger) (string, *pubsub.Hub) {
	if d.cluster && d.sharded(sharded, log) {
		return "spublish", pubsub.NewSharded(func(_ context.Context, node string) pubsub.Conn {
			return newConn(nodeClient(d.c, node))
		}, d.hubRouter())
	}
	return "publish", pubsub.New(d.openConn)
}

// sharded reports whether a cluster's unlock messages use sharded pub/sub:
// as WithShardedPubSub says, or else what the go-redis driver and
// Redisson's AUTO mode pick, so that dlock Clients on either library hear
// each other: sharded if PUBSUB SHARDNUMSUB is answered, classic if Redis
// refuses it (before Redis 7, or an ACL user without +pubsub); sharded if
// the cluster cannot be reached.
func (d *rdriver) sharded(choice *bool, log *slog.Logger) bool {
	if choice != nil {
		return *choice
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := d.c.Do(ctx, d.c.B().PubsubShardnumsub().Build()).Error()
	_, refused := rueidis.IsRedisErr(err)
	switch {
	case err == nil:
		return true
	case refused:
		log.Info("dlock: PUBSUB SHARDNUMSUB refused; unlock messages use PUBLISH and SUBSCRIBE, as Redisson's AUTO mode does", "error", err)
		return false
	}
	log.Warn("dlock: could not probe the cluster for sharded pub/sub; using SPUBLISH and SSUBSCRIBE (set WithShardedPubSub to choose)", "error", err)
	return true
}

// probeTimeout bounds the probe of a cluster's sharded pub/sub.
const probeTimeout = 5 * time.Second

func (d *rdriver) openConn(context.Context) pubsub.Conn { return newConn(d.c) }

func retryDeadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(transientBudget)
}

// again waits pause before another try, and reports false when ctx ends
// first or the try would start after deadline.
func again(ctx context.Context, pause time.Duration, deadline time.Time) bool {
	if time.Now().Add(pause).After(deadline) {
		return false
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
