package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// session is the connection of one command: the Redis clients for its
// endpoints and a dlock Client on them.
type session struct {
	eps   []endpoint
	rdbs  []redis.UniversalClient
	locks *dlock.Client
}

// openSession parses the connection flags and creates the clients without
// talking to Redis yet, so that usage errors come first; ping checks the
// connection.
func openSession(eps []endpoint, opts ...dlock.Option) (*session, error) {
	if len(eps) > 1 {
		return nil, usageError("%d Redis URLs given: several --redis are for RedLock, which this dlock does not have; give one URL (a cluster's seeds go in one URL as addr= parameters)", len(eps))
	}
	s := &session{eps: eps}
	for _, ep := range eps {
		s.rdbs = append(s.rdbs, ep.open())
	}
	var err error
	s.locks, err = dlock.New(s.rdbs[0], opts...)
	if err != nil {
		s.close()
		return nil, optionError("", err)
	}
	return s, nil
}

// ping checks that every endpoint answers and accepts the credentials.
func (s *session) ping(ctx context.Context) error {
	for i, ep := range s.eps {
		if err := pingOne(ctx, ep, s.rdbs[i]); err != nil {
			return err
		}
	}
	return nil
}

// close closes the dlock Client and then the Redis clients.
func (s *session) close() {
	if s.locks != nil {
		_ = s.locks.Close()
	}
	for _, r := range s.rdbs {
		_ = r.Close()
	}
}

// optionError reports a name or option the library rejected as a usage
// error.
func optionError(cmd string, err error) error {
	prefix := ""
	if cmd != "" {
		prefix = cmd + ": "
	}
	if errors.Is(err, dlock.ErrInvalidName) || errors.Is(err, dlock.ErrInvalidOption) {
		return usageError("%s%s", prefix, trimPrefix(err))
	}
	return fmt.Errorf("%s%w", prefix, err)
}
