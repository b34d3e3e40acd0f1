package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff bounds of SyncLocker.Lock's retries after a failed attempt.
const (
	syncLockerMinBackoff = 10 * time.Millisecond
	syncLockerMaxBackoff = time.Second
)

// SyncLocker adapts a Locker to sync.Locker, for code that takes a
// sync.Locker (sync.Cond, a cache's lock hook). Goroutines sharing one
// SyncLocker exclude each other as with a sync.Mutex, and processes
// exclude each other through the distributed lock.
//
// sync.Locker has no error results, so SyncLocker never returns errors;
// it reports them to the onError function given to NewSyncLocker:
//
//   - Lock blocks until it holds the lock. Each failed attempt (Redis
//     unreachable, NOPERM, ...) is reported and retried after a pause that
//     doubles from 10 ms up to 1 s. Lock never returns without the lock.
//     The one exception is a closed Client (ErrClosed): no lock can be taken
//     through it again, so Lock panics, as sync.Mutex does on misuse,
//     rather than block forever.
//   - Unlock releases the lock. An error (the lock was lost, Redis
//     unreachable) is reported; the lock then frees itself when its lease
//     runs out. Unlock on a SyncLocker that is not locked reports an error
//     matching ErrNotHeld and does nothing else (sync.Mutex would crash).
//
// A lock lost while held cannot be reported through sync.Locker either:
// watch LockContext().Done() in long critical sections, or use Do or the
// Locker directly where errors can be returned.
type SyncLocker struct {
	l       Locker
	onError func(error)

	// local makes the goroutines of this process queue here rather than
	// in Redis, and keeps one hold per SyncLocker at a time.
	local sync.Mutex

	mu      sync.Mutex
	lockCtx context.Context // the current hold's lock context; nil when unlocked
}

var _ sync.Locker = (*SyncLocker)(nil)

// NewSyncLocker returns a sync.Locker on l. onError receives every error
// that Lock and Unlock cannot return (see SyncLocker); it is called from
// the goroutine calling Lock or Unlock and must not call them. A nil
// onError logs the errors with slog.Default at level Error.
//
// A nil l (or a nil *Mutex, ... in l) makes NewSyncLocker panic, with a
// message naming the mistake, as regexp.MustCompile does on a bad
// pattern: it is a bug in the calling code, which no retry can mend, and
// sync.Locker's Lock has no error to return it with. Reporting it to
// onError would leave Lock to block forever (a silent deadlock) or to
// return without the lock (no exclusion); a panic where the SyncLocker is
// made points at the faulty line at once.
func NewSyncLocker(l Locker, onError func(error)) *SyncLocker {
	if nilLocker(l) {
		panic("dlock: NewSyncLocker with a nil Locker")
	}
	if onError == nil {
		onError = func(err error) { slog.Default().Error(err.Error()) }
	}
	return &SyncLocker{l: l, onError: onError}
}

// Lock takes the lock, blocking until it holds it (see SyncLocker for
// errors).
func (s *SyncLocker) Lock() {
	s.local.Lock()
	backoff := syncLockerMinBackoff
	for {
		lockCtx, err := s.l.Lock(context.Background())
		if err == nil {
			s.mu.Lock()
			s.lockCtx = lockCtx
			s.mu.Unlock()
			return
		}
		if errors.Is(err, ErrClosed) {
			s.local.Unlock()
			panic(fmt.Sprintf("dlock: SyncLocker.Lock on %q through a closed Client: %v", s.l.Name(), err))
		}
		// Half to all of backoff, so that processes that failed together
		// do not retry together.
		pause := backoff/2 + rand.N(backoff/2+1)
		s.onError(fmt.Errorf("SyncLocker.Lock: %w (retrying in %v)", err, pause.Round(time.Millisecond)))
		time.Sleep(pause)
		backoff = min(2*backoff, syncLockerMaxBackoff)
	}
}

// Unlock releases the lock (see SyncLocker for errors). As with
// sync.Mutex, any goroutine may unlock what another locked.
func (s *SyncLocker) Unlock() {
	s.mu.Lock()
	lockCtx := s.lockCtx
	s.lockCtx = nil
	s.mu.Unlock()
	if lockCtx == nil {
		s.onError(fmt.Errorf("%w: %q: SyncLocker.Unlock of an unlocked SyncLocker", ErrNotHeld, s.l.Name()))
		return
	}
	if err := s.l.Unlock(lockCtx); err != nil {
		s.onError(fmt.Errorf("SyncLocker.Unlock: %w", err))
	}
	s.local.Unlock()
}

// LockContext returns the lock context of the current hold, which is
// cancelled if the lock is lost, or nil when the SyncLocker is not locked.
func (s *SyncLocker) LockContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lockCtx
}
