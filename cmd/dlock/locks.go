package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
)

// locker is what the CLI needs of every kind of lock.
type locker interface {
	Lock(ctx context.Context) (context.Context, error)
	TryLock(ctx context.Context) (context.Context, error)
	Unlock(lockCtx context.Context) error
	ForceUnlock(ctx context.Context) (bool, error)
}

// kinds are the values of --kind.
var kinds = []string{"mutex", "fair", "read", "write"}

// newLocker returns a handle on lock name of the given kind: on one Redis
// deployment a Mutex, FairMutex or a half of an RWMutex; on several
// independent servers a RedLock, which is a mutex.
func (s *session) newLocker(kind, name string, opts ...dlock.LockOption) (locker, error) {
	if len(s.clients) > 1 {
		if kind != "mutex" {
			return nil, fmt.Errorf("%w: several --redis make a RedLock, which is a mutex; --kind %s needs one Redis deployment", dlock.ErrInvalidOption, kind)
		}
		return dlock.NewRedLock(s.clients, name, opts...)
	}
	c := s.clients[0]
	switch kind {
	case "mutex":
		return c.NewMutex(name, opts...)
	case "fair":
		return c.NewFairMutex(name, opts...)
	case "read", "write":
		rw, err := c.NewRWMutex(name, opts...)
		if err != nil {
			return nil, err
		}
		if kind == "read" {
			return rw.ReadLock(), nil
		}
		return rw.WriteLock(), nil
	}
	return nil, fmt.Errorf("%w: unknown kind %q (want %s)", dlock.ErrInvalidOption, kind, strings.Join(kinds, ", "))
}

// forceKind is the kind of handle whose ForceUnlock frees a lock found in
// Redis with the given kind and mode.
func forceKind(st lockState) string {
	switch {
	case st.Kind == "fair":
		return "fair"
	case st.Kind == "rwlock" && st.Mode == "read":
		return "read"
	case st.Kind == "rwlock":
		return "write"
	}
	return "mutex"
}
