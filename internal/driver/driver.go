// Package driver is the seam between dlock's core and the Redis client
// library it talks through. The core sends every command through one
// Driver: its scripts (with the re-send accounting, retries and reach gate
// of internal/transport), the few plain commands it reads state with, its
// pub/sub connection and the iteration over a cluster's masters. The
// go-redis Driver lives in package dlock (dlock.New); the rueidis one in
// the module github.com/dlock-go/dlock/dlockrueidis, so that a go-redis
// user's build compiles no rueidis code.
//
// The vocabulary of the seam is go-redis's value types (*redis.Cmd and its
// typed relatives, *redis.Script, redis.Error, redis.Nil): the core's reply
// parsing is written against them, and go-redis is the core module's one
// dependency anyway. Another Driver fills those values from its own
// replies; only go-redis's types cross the seam, never its connections.
package driver

import (
	"context"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Commands are the plain commands the core sends besides its scripts,
// spelled as go-redis's Cmdable spells them, and redis.Scripter for
// redis.Script.Run. A missing key or field is reported as redis.Nil and an
// error reply from Redis as a redis.Error, as go-redis does.
type Commands interface {
	redis.Scripter
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	Get(ctx context.Context, key string) *redis.StringCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	HKeys(ctx context.Context, key string) *redis.StringSliceCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
	PExpire(ctx context.Context, key string, expiration time.Duration) *redis.BoolCmd
	Persist(ctx context.Context, key string) *redis.BoolCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
	ZRangeWithScores(ctx context.Context, key string, start, stop int64) *redis.ZSliceCmd
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

// Driver is one Redis deployment (a server, a Sentinel-watched master or a
// cluster) as a dlock Client uses it. It is safe for concurrent use.
type Driver interface {
	Commands

	// Run, RunOnce and Call run a script as transport.Transport's methods
	// of the same names do: Run a script safe to send twice (reporting
	// whether it was sent more than once), RunOnce one that must run at
	// most once (a lost reply wraps transport.ErrNoReply), Call either
	// for a caller that must fail at once while the gate is shut. Each
	// sends EVALSHA and falls back to EVAL on NOSCRIPT.
	Run(ctx context.Context, chk *transport.Check, s *redis.Script, keys []string, args ...any) (*redis.Cmd, bool)
	RunOnce(ctx context.Context, chk *transport.Check, s *redis.Script, keys []string, args ...any) *redis.Cmd
	Call(ctx context.Context, chk *transport.Check, once bool, s *redis.Script, keys []string, args ...any) *redis.Cmd
	// Gate is the gate on Redis being reachable; Synced reports whether
	// writes wait for replicas; Reroute tells a cluster client that err
	// may mean its slot map is stale.
	Gate() *transport.Gate
	Synced() bool
	Reroute(ctx context.Context, err error)
	// CanLeave reports whether a caller whose ctx ends may leave a
	// script it sent to finish without it (transport.MayLeave): the
	// go-redis transport on a single server without replica sync.
	CanLeave() bool

	// Masters runs fn on every master: the one server, or each master
	// of a cluster (concurrently).
	Masters(ctx context.Context, fn func(ctx context.Context, m Commands) error) error
	// Hub opens the shared pub/sub hub and returns the command the
	// scripts publish unlock messages with ("publish" or "spublish").
	// sharded is WithShardedPubSub's choice (nil: the driver decides, on
	// a cluster); log hears of that decision.
	Hub(sharded *bool, log *slog.Logger) (publish string, hub *pubsub.Hub)

	// Cluster reports a cluster (renewals are grouped by slot).
	Cluster() bool
	// Deadlines reports that every request ends by its ctx's deadline, so
	// that an attempt with a deadline may run on its caller's goroutine.
	Deadlines() bool
	// Handle is the user's Redis client, comparable: two Drivers with the
	// same Handle talk to the same servers (RedLock refuses them).
	Handle() any
	// Addr names the servers as the Redis client knows them before it
	// dials (a cluster's seeds joined by commas), or is "" when it does
	// not know them (a Sentinel client): RedLock refuses two Clients with
	// the same Addr.
	Addr() string
	// Shutdown stops what the Driver started (the gate's prober). The
	// user's Redis client stays open.
	Shutdown()
}

// Config is what a Driver needs from the dlock Client's options.
type Config struct {
	// Replicas and ReplicaTimeout are WithReplicaSync's (0 replicas: off).
	Replicas       int
	ReplicaTimeout time.Duration
}

// Open makes a Driver for a Client's options; it fails when the driver
// cannot honour them.
type Open func(Config) (Driver, error)

// Connect makes a *dlock.Client on the Driver that open returns, with
// dlock's options: package dlock sets it in its init to its own
// constructor, of type
//
//	func(open driver.Open, opts []dlock.Option) (*dlock.Client, error)
//
// and the other drivers' packages assert it to that type. It is a hook
// rather than an exported dlock function so that dlock's public API names
// no Driver: the seam stays internal and may change with every release,
// while only packages under github.com/dlock-go/dlock can import this one.
// It is typed any because this package cannot name dlock's types (dlock
// imports it).
var Connect any
