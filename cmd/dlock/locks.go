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
var kinds = []string{"mutex"}

// newLocker returns a handle on lock name of the given kind.
func newLocker(c *dlock.Client, kind, name string, opts ...dlock.LockOption) (locker, error) {
	switch kind {
	case "mutex":
		return c.NewMutex(name, opts...)
	}
	return nil, fmt.Errorf("%w: unknown kind %q (want %s)", dlock.ErrInvalidOption, kind, strings.Join(kinds, ", "))
}
