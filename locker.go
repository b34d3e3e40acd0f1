package dlock

import "context"

// Locker is a lock that a MultiLock can hold: Mutex, RedLock and MultiLock
// satisfy it, and so does every lock kind built on the same engine. Lock
// and TryLock return a lock context that carries the owner and ends with
// Unlock (or is cancelled with cause ErrLockLost if the lock is lost);
// Unlock takes that context.
type Locker interface {
	// Name returns the lock's name.
	Name() string
	// Lock takes the lock, waiting as long as ctx allows.
	Lock(ctx context.Context) (context.Context, error)
	// TryLock makes one attempt to take the lock.
	TryLock(ctx context.Context) (context.Context, error)
	// Unlock releases the hold lockCtx belongs to.
	Unlock(lockCtx context.Context) error
}

var (
	_ Locker = (*Mutex)(nil)
	_ Locker = (*RedLock)(nil)
	_ Locker = (*MultiLock)(nil)
)

// orderer is implemented by dlock's own locks: orderKey is the key a
// MultiLock sorts its members by. Other Lockers are sorted by Name.
type orderer interface {
	orderKey() string
}

// orderKey sorts by name, then by role (the halves of a read-write lock),
// then by Client id (the same name on two Clients may be two servers).
func (h *handle) orderKey() string {
	return h.name + "\x00" + h.kind.role() + "\x00" + h.c.id
}
