package dlock

import (
	"context"
	"errors"
	"fmt"
)

// Do takes l, waiting as long as ctx allows, calls fn with the lock
// context, and releases l when fn returns or panics. It returns the error
// of Lock (fn is then not called), or fn's error joined (errors.Join) with
// the error of Unlock. If the lock was lost while fn ran, the error wraps
// ErrLockLost even when fn returned nil: fn may have run without the lock.
//
// fn should do its work with lockCtx, which is cancelled when the lock is
// lost. A panic in fn is passed on after the lock is released.
func Do(ctx context.Context, l Locker, fn func(lockCtx context.Context) error) (err error) {
	lockCtx, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	defer func() {
		unlockErr := l.Unlock(lockCtx)
		if cause := context.Cause(lockCtx); errors.Is(cause, ErrLockLost) && !errors.Is(unlockErr, ErrLockLost) && !errors.Is(err, ErrLockLost) {
			unlockErr = errors.Join(cause, unlockErr)
		}
		if unlockErr != nil {
			err = errors.Join(err, fmt.Errorf("releasing %q: %w", l.Name(), unlockErr))
		}
	}()
	return fn(lockCtx)
}
