package dlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// errorLog collects what a SyncLocker reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
	seen chan struct{} // gets a value (non-blocking) on each report
}

func newErrorLog() *errorLog { return &errorLog{seen: make(chan struct{}, 1)} }

func (l *errorLog) report(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
	select {
	case l.seen <- struct{}{}:
	default:
	}
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// TestSyncLockerExcludes: goroutines sharing a SyncLocker, and SyncLockers
// on different Clients, exclude each other.
func TestSyncLockerExcludes(t *testing.T) {
	name := lockName(t)
	log := newErrorLog()
	checkMutualExclusion(t, name, 3, 4, 120, func(c *Client) Locker {
		return syncLockerAsLocker{NewSyncLocker(mustMutex(t, c, name), log.report)}
	})
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors reported: %v", errs)
	}
}

// syncLockerAsLocker lets checkMutualExclusion drive a SyncLocker.
type syncLockerAsLocker struct{ s *SyncLocker }

func (a syncLockerAsLocker) Name() string { return a.s.l.Name() }
func (a syncLockerAsLocker) Lock(context.Context) (context.Context, error) {
	a.s.Lock()
	return a.s.LockContext(), nil
}
func (a syncLockerAsLocker) TryLock(context.Context) (context.Context, error) {
	return nil, errors.New("not supported")
}
func (a syncLockerAsLocker) Unlock(context.Context) error {
	a.s.Unlock()
	return nil
}

// TestSyncLockerHolds: while a SyncLocker is locked, the lock is held in
// Redis by the owner of LockContext; after Unlock it is free and
// LockContext is nil.
func TestSyncLockerHolds(t *testing.T) {
	ctx := t.Context()
	name := lockName(t)
	m := mustMutex(t, newClient(t, nil), name)
	s := NewSyncLocker(m, func(err error) { t.Errorf("reported: %v", err) })
	if s.LockContext() != nil {
		t.Error("LockContext is not nil before Lock")
	}
	s.Lock()
	if n, err := m.HoldCount(s.LockContext()); n != 1 || err != nil {
		t.Errorf("HoldCount(LockContext()) = %d, %v; want 1", n, err)
	}
	s.Unlock()
	if locked, err := m.IsLocked(ctx); locked || err != nil {
		t.Errorf("after Unlock: IsLocked = %v, %v", locked, err)
	}
	if s.LockContext() != nil {
		t.Error("LockContext is not nil after Unlock")
	}
}

// TestSyncLockerRetries: Lock through a user that lacks permission
// reports the NOPERM error and keeps trying; once the permission is
// granted it takes the lock.
func TestSyncLockerRetries(t *testing.T) {
	ctx := t.Context()
	admin := newRedis(t)
	user := "dlock-synclocker-" + strings.ToLower(t.Name())
	name := "app:" + lockName(t)
	allowed := append([]any{"ACL", "SETUSER", user}, minimalACL...)
	// First only what the connection needs: every script is refused.
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">secret", "resetkeys", "resetchannels", "-@all", "+hello", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer rdb.Close()

	log := newErrorLog()
	s := NewSyncLocker(mustMutex(t, newClient(t, rdb), name), log.report)
	locked := make(chan struct{})
	go func() {
		s.Lock()
		close(locked)
	}()
	recv(t, log.seen, 10*time.Second, "first error report")
	recv(t, log.seen, 10*time.Second, "second error report: Lock retried")
	select {
	case <-locked:
		t.Fatal("Lock returned without permission to take the lock")
	default:
	}
	if err := admin.Do(ctx, allowed...).Err(); err != nil {
		t.Fatal(err)
	}
	recv(t, locked, 10*time.Second, "Lock once permitted")
	s.Unlock()
	errs := log.all()
	if len(errs) < 2 || !redis.IsPermissionError(errors.Unwrap(errs[0])) && !strings.Contains(errs[0].Error(), "NOPERM") {
		t.Errorf("reported %v; want NOPERM errors", errs)
	}
	if !strings.Contains(errs[0].Error(), "retrying in") {
		t.Errorf("report %q does not say Lock retries", errs[0])
	}
}

// TestSyncLockerUnlockErrors: Unlock of an unlocked SyncLocker reports
// ErrNotHeld; Unlock after the lock was lost reports the loss. Neither
// panics.
func TestSyncLockerUnlockErrors(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	log := newErrorLog()
	s := NewSyncLocker(mustMutex(t, newClient(t, nil), name), log.report)

	s.Unlock()
	if errs := log.all(); len(errs) != 1 || !errors.Is(errs[0], ErrNotHeld) {
		t.Fatalf("Unlock when not locked reported %v; want one ErrNotHeld", errs)
	}

	s.Lock()
	lockCtx := s.LockContext()
	if err := rdb.Del(t.Context(), name).Err(); err != nil {
		t.Fatal(err)
	}
	s.Unlock()
	errs := log.all()
	if len(errs) != 2 || !errors.Is(errs[1], ErrNotHeld) {
		t.Errorf("Unlock after the key was deleted reported %v; want ErrNotHeld", errs[1:])
	}
	if !errors.Is(context.Cause(lockCtx), ErrLockLost) {
		t.Errorf("lock context cause %v, want ErrLockLost", context.Cause(lockCtx))
	}
	// The SyncLocker is usable again.
	s.Lock()
	//lint:ignore SA2001 the Lock/Unlock pair itself is what is tested
	s.Unlock()
	if n := len(log.all()); n != 2 {
		t.Errorf("%d reports after a clean Lock/Unlock, want still 2", n)
	}
}

// TestSyncLockerClosedClient: Lock through a closed Client panics with a
// message naming ErrClosed, rather than blocking forever, and leaves the
// SyncLocker unlocked.
func TestSyncLockerClosedClient(t *testing.T) {
	name := lockName(t)
	c, err := New(newRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSyncLocker(mustMutex(t, c, name), func(err error) { t.Errorf("reported: %v", err) })
	_ = c.Close()
	func() {
		defer func() {
			r := recover()
			if msg, _ := r.(string); !strings.Contains(msg, "closed") {
				t.Errorf("recovered %v, want a panic naming the closed Client", r)
			}
		}()
		s.Lock()
	}()
	if !s.local.TryLock() {
		t.Error("the panicking Lock left the SyncLocker locked")
	}
}

// TestNewSyncLockerNil: a nil Locker (or a nil *Mutex in one) is refused
// where the SyncLocker is made, with a panic naming the mistake (see
// NewSyncLocker), not later in Lock with a nil dereference.
func TestNewSyncLockerNil(t *testing.T) {
	for _, l := range []Locker{nil, (*Mutex)(nil)} {
		var s *SyncLocker
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, "nil Locker") {
					t.Errorf("NewSyncLocker(%#v): recovered %v, want a panic naming the nil Locker", l, r)
				}
			}()
			s = NewSyncLocker(l, nil)
		}()
		if s != nil {
			t.Errorf("NewSyncLocker(%#v) returned a SyncLocker", l)
		}
	}
}
