// Package dlockrueidis runs dlock on rueidis, the Redis organisation's
// other Go client: the same locks, semaphores and synchronizers, on the
// same Redis data, so a dlock Client on go-redis and one on rueidis
// exclude each other on a lock and wake each other's waiters. It is a
// module of its own so that a go-redis user's build compiles no rueidis
// code.
//
// rueidis pipelines the commands of concurrent goroutines on one
// connection and ends each request by its ctx, so an attempt with a
// deadline runs on its caller's goroutine.
package dlockrueidis

import (
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/driver"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Scripter returns client as the script runner that dlock's fenced writes
// take (dlock.FencedSet, dlock.FencedHSet), so that a rueidis user writes
// fenced data without a go-redis client. Scripts run with EVALSHA and fall
// back to EVAL on NOSCRIPT, as go-redis's redis.Script does.
func Scripter(client rueidis.Client) redis.Scripter {
	return &rdriver{c: client, cluster: client.Mode() == rueidis.ClientModeCluster}
}

// New returns a dlock Client that talks to Redis through client: a
// standalone, Sentinel (rueidis.ClientOption.Sentinel) or cluster
// rueidis.Client. dlock does not close client. The options are dlock's;
// WithReplicaSync is not supported on rueidis and is refused with
// dlock.ErrInvalidOption.
//
// client must not set rueidis.ClientOption.ConnLifetime: rueidis sends a
// command again when it failed because its connection's lifetime ended,
// which could run a script that must run at most once (a semaphore's
// acquire, a fenced write) twice. rueidis.Client does not expose its
// options, so New cannot refuse such a client.
//
// The Client is made through a hook of dlock's internal seam
// (internal/driver.Connect): dlock's public API names no driver, so that
// the seam between the core and a Redis client library stays internal and
// free to change, while this package, whose import path lies under
// dlock's, may use it.
func New(client rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil rueidis client", dlock.ErrInvalidOption)
	}
	open := func(cfg driver.Config) (driver.Driver, error) {
		if cfg.Replicas > 0 {
			return nil, fmt.Errorf("%w: replica sync is not supported on rueidis", dlock.ErrInvalidOption)
		}
		return &rdriver{c: client, cluster: client.Mode() == rueidis.ClientModeCluster}, nil
	}
	connect, ok := driver.Connect.(func(driver.Open, []dlock.Option) (*dlock.Client, error))
	if !ok {
		return nil, fmt.Errorf("dlock: dlockrueidis does not match this dlock version (driver hook %T)", driver.Connect)
	}
	return connect(open, opts)
}
