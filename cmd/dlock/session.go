package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// session is the connection of one command: a Redis client and a dlock
// Client per endpoint (several endpoints are RedLock's independent
// servers).
type session struct {
	eps     []endpoint
	rdbs    []redis.UniversalClient
	clients []*dlock.Client
}

// openSession creates the clients without talking to Redis yet, so that
// usage errors come first; ping checks the connection.
// The Clients log through log (dlock.WithLogger), before opts.
func openSession(log *cliLog, eps []endpoint, opts ...dlock.Option) (*session, error) {
	s := &session{eps: eps}
	opts = append([]dlock.Option{dlock.WithLogger(log.slogger())}, opts...)
	for _, ep := range eps {
		rdb := ep.open()
		s.rdbs = append(s.rdbs, rdb)
		c, err := dlock.New(rdb, opts...)
		if err != nil {
			s.close()
			return nil, optionError("", err)
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

// openReached is openSession followed by ping, for commands with no
// usage checks that need the Clients: the session, or the first error
// (and nothing left open).
func openReached(ctx context.Context, log *cliLog, eps []endpoint) (*session, error) {
	s, err := openSession(log, eps)
	if err != nil {
		return nil, err
	}
	if err := s.ping(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// validName checks a lock name the way the library does.
func (s *session) validName(cmd, name string) error {
	if _, err := s.clients[0].NewMutex(name); err != nil {
		return optionError(cmd, err)
	}
	return nil
}

// ping checks that every endpoint answers and accepts the credentials,
// each within pingTimeout.
func (s *session) ping(ctx context.Context) error {
	return s.pingWithin(ctx, pingTimeout)
}

// pingWithin is ping with timeout for each endpoint.
func (s *session) pingWithin(ctx context.Context, timeout time.Duration) error {
	for _, ep := range s.eps {
		if err := pingOne(ctx, ep, timeout); err != nil {
			return err
		}
	}
	return nil
}

// close closes the dlock Clients and then the Redis clients.
func (s *session) close() {
	for _, c := range s.clients {
		_ = c.Close()
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
