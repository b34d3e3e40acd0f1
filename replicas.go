package dlock

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The settings of replica sync (WithReplicaSync) and their checks; what it
// does, and why it narrows but does not close the window in which a
// failover loses a write, is told where it is done: internal/transport
// replicas.go.

// replicaSync is the configuration WithReplicaSync sets.
type replicaSync struct {
	replicas int           // 0: off
	timeout  time.Duration // WAIT's timeout
}

func (r replicaSync) enabled() bool { return r.replicas > 0 }

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
