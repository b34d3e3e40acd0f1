package dlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// Do takes l, waiting as long as ctx allows, calls fn with the lock
// context, and releases l when fn returns or panics. It returns the error
// of Lock (fn is then not called), or fn's error joined (errors.Join) with
// the error of Unlock. If the lock was lost while fn ran, the error wraps
// ErrLockLost even when fn returned nil: fn may have run without the lock.
//
// A nil l (or a nil *Mutex, ... in l) or a nil fn is an error wrapping
// ErrInvalidOption, returned before anything is sent: the lock is not
// taken.
//
// fn should do its work with lockCtx, which is cancelled when the lock is
// lost. A panic in fn is passed on after the lock is released.
func Do(ctx context.Context, l Locker, fn func(lockCtx context.Context) error) (err error) {
	if nilLocker(l) {
		return fmt.Errorf("%w: Do with a nil Locker", ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: Do on %q with a nil function", ErrInvalidOption, l.Name())
	}
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

// nilLocker reports whether l is nil or holds a nil pointer (a nil *Mutex
// in a Locker), whose methods would panic.
func nilLocker(l Locker) bool {
	if l == nil {
		return true
	}
	v := reflect.ValueOf(l)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
