package dlock

// The go-redis Driver (internal/driver): what New hands the core. It is a
// thin shell: the go-redis client answers the plain commands itself
// (embedded), and internal/transport, which owns the batcher, the re-send
// accounting and the reach gate, runs the scripts, so that the go-redis
// path is the same code, and as fast, as before the seam.

import (
	"context"
	"log/slog"
	"strings"

	"github.com/dlock-go/dlock/internal/driver"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

func init() { driver.Connect = connect }

// goRedis is the Driver of a *redis.Client (plain or Sentinel) or a
// *redis.ClusterClient.
type goRedis struct {
	redis.UniversalClient
	*transport.Transport
	deadlines bool
}

var _ driver.Driver = (*goRedis)(nil)

// openGoRedis returns the Open of rdb, which New has checked.
func openGoRedis(rdb redis.UniversalClient) driver.Open {
	return func(cfg driver.Config) (driver.Driver, error) {
		rs := replicaSync{replicas: cfg.Replicas, timeout: cfg.ReplicaTimeout}
		if err := rs.check(rdb); err != nil {
			return nil, err
		}
		g := &goRedis{UniversalClient: rdb, deadlines: honoursDeadlines(rdb)}
		g.Transport = transport.New(rdb, transport.Config{Replicas: cfg.Replicas, ReplicaTimeout: cfg.ReplicaTimeout, Deadlines: g.deadlines})
		return g, nil
	}
}

func (g *goRedis) Masters(ctx context.Context, fn func(ctx context.Context, m driver.Commands) error) error {
	if cc, ok := g.UniversalClient.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	}
	return fn(ctx, g.UniversalClient)
}

func (g *goRedis) Hub(sharded *bool, log *slog.Logger) (string, *pubsub.Hub) {
	return newHub(g.UniversalClient, shardedPubSub(g.UniversalClient, config{shardedPubSub: sharded, logger: log}))
}

func (g *goRedis) Cluster() bool   { return isCluster(g.UniversalClient) }
func (g *goRedis) Deadlines() bool { return g.deadlines }
func (g *goRedis) Handle() any     { return g.UniversalClient }

// Addr is the address a plain client dials, or a cluster client's seeds;
// "" for a Sentinel failover client, whose Options().Addr names no server.
func (g *goRedis) Addr() string {
	switch rdb := g.UniversalClient.(type) {
	case *redis.Client:
		if a := rdb.Options().Addr; a != failoverAddr {
			return a
		}
	case *redis.ClusterClient:
		return strings.Join(rdb.Options().Addrs, ",")
	}
	return ""
}
func (g *goRedis) Shutdown() { g.Transport.Close() }

// The methods both embedded values have, resolved.

func (g *goRedis) Ping(ctx context.Context) *redis.StatusCmd { return g.UniversalClient.Ping(ctx) }
