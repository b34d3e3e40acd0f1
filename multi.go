package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// multiMemberWait is how long Lock waits for each member after the first
// while it holds the ones before it, before it releases them and starts a
// new round (Redisson waits 1500 ms per lock).
const multiMemberWait = 1500 * time.Millisecond

// multiRetryDelay is the mean of the random pause between two rounds.
const multiRetryDelay = 20 * time.Millisecond

// multiReleaseTries is how often a member's release is tried before the
// member is given up to expire with its lease.
const multiReleaseTries = 3

// MultiLock holds a set of locks as one (Redisson MultiLock): all of them or
// none. The members may be any dlock locks, on one or several Clients and
// servers, each with its own options (lease, fencing); each keeps its own
// watchdog.
//
// Members are locked in one order fixed by their names (then their
// Clients), whatever order NewMultiLock got them in, so MultiLocks over
// overlapping sets cannot deadlock one another. Lock waits for the first
// member as long as ctx allows, and for each later one up to 1.5 s while
// holding the ones before it; then it releases what it holds and starts
// again after a short random pause, until ctx ends. A member that fails
// with anything but ErrNotObtained ends Lock at once, with nothing held.
//
// Like every dlock lock, Lock returns a lock context: it carries the owner
// of every member (one owner per Client, so the members re-enter locks the
// caller already holds, and a Lock with the lock context re-enters the
// members), it ends with Unlock, and it is cancelled, with a cause wrapping
// the member's (ErrLockLost when lost), as soon as any member's hold ends.
// Token on it returns the token of the last fenced member in lock order.
// A MultiLock is safe for concurrent use.
type MultiLock struct {
	members    []Locker // in lock order
	name       string
	memberWait time.Duration
}

// NewMultiLock returns a MultiLock over locks. A lock given twice is taken
// twice (reentrantly). It talks to Redis only when used.
func NewMultiLock(locks ...Locker) (*MultiLock, error) {
	if len(locks) == 0 {
		return nil, fmt.Errorf("%w: a MultiLock needs at least one lock", ErrInvalidOption)
	}
	type member struct {
		l   Locker
		key string
	}
	sorted := make([]member, len(locks))
	for i, l := range locks {
		if isNilLocker(l) {
			return nil, fmt.Errorf("%w: MultiLock member %d is nil", ErrInvalidOption, i)
		}
		sorted[i] = member{l, l.Name()}
		if o, ok := l.(orderer); ok {
			sorted[i].key = o.orderKey()
		}
	}
	slices.SortStableFunc(sorted, func(a, b member) int { return cmp.Compare(a.key, b.key) })
	members := make([]Locker, len(sorted))
	for i, s := range sorted {
		members[i] = s.l
	}
	names := make([]string, len(members))
	for i, l := range members {
		names[i] = l.Name()
	}
	return &MultiLock{members: members, name: strings.Join(names, ","), memberWait: multiMemberWait}, nil
}

// isNilLocker reports whether l is nil or a nil pointer, which would panic
// when used.
func isNilLocker(l Locker) bool {
	if l == nil {
		return true
	}
	v := reflect.ValueOf(l)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// check rejects calls that cannot work: a MultiLock not made by
// NewMultiLock, a nil context.
func (m *MultiLock) check(ctx context.Context) error {
	switch {
	case m == nil || len(m.members) == 0:
		return fmt.Errorf("%w: MultiLock not made by NewMultiLock", ErrInvalidOption)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	return nil
}

// Name returns the members' names, in lock order, joined by commas.
func (m *MultiLock) Name() string { return m.name }

func (m *MultiLock) orderKey() string { return m.name }

// multiKey finds a MultiLock's hold in its lock context.
type multiKey struct{ m *MultiLock }

// multiHold is one successful Lock of a MultiLock.
type multiHold struct {
	cancel context.CancelCauseFunc
	stops  []func() bool // stop watching the members

	mu   sync.Mutex
	ctxs []context.Context // the members' lock contexts, in lock order; nil once unlocked
}

// Lock takes every member, waiting as long as ctx allows. When ctx ends
// first, the error wraps ErrNotObtained and ctx.Err(), and no member is
// held. The lock context it returns is described on MultiLock.
func (m *MultiLock) Lock(ctx context.Context) (context.Context, error) {
	return m.acquire(ctx, false)
}

// TryLock makes one attempt at every member, in lock order, and keeps
// none of them if one fails; the error then wraps that member's error
// (ErrNotObtained when it is held by another owner).
func (m *MultiLock) TryLock(ctx context.Context) (context.Context, error) {
	return m.acquire(ctx, true)
}

func (m *MultiLock) acquire(ctx context.Context, try bool) (context.Context, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	for {
		held, err := m.round(ctx, try)
		if err == nil {
			return m.hold(held), nil
		}
		var busy *busyMember
		switch {
		case ctx.Err() != nil:
			if !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w: %w; %w", ErrNotObtained, ctx.Err(), err)
			}
			return nil, fmt.Errorf("dlock: multilock %q: %w", m.name, err)
		case try || !errors.As(err, &busy):
			return nil, fmt.Errorf("dlock: multilock %q: %w", m.name, err)
		}
		pause := time.NewTimer(multiRetryDelay/2 + rand.N(multiRetryDelay))
		select {
		case <-pause.C:
		case <-ctx.Done():
			pause.Stop()
			return nil, fmt.Errorf("dlock: multilock %q: %w: %w; %w", m.name, ErrNotObtained, ctx.Err(), err)
		}
	}
}

// busyMember is a round that failed because a member was held elsewhere
// (or lost meanwhile): worth another round.
type busyMember struct {
	name string
	err  error
}

func (e *busyMember) Error() string { return fmt.Sprintf("member %q: %v", e.name, e.err) }
func (e *busyMember) Unwrap() error { return e.err }

// round locks every member in order. Each member is locked with a context
// that carries the values of the previous member's lock context, so that
// all members on one Client share one owner, and the cancellation of ctx.
// If a member fails, the ones held are released before round returns.
func (m *MultiLock) round(ctx context.Context, try bool) ([]context.Context, error) {
	held := make([]context.Context, 0, len(m.members))
	values := ctx
	for i, l := range m.members {
		step, cancel := m.step(ctx, values, i, try)
		var lockCtx context.Context
		var err error
		if try {
			lockCtx, err = l.TryLock(step)
		} else {
			lockCtx, err = l.Lock(step)
		}
		cancel()
		if err != nil {
			if errors.Is(err, ErrNotObtained) {
				err = &busyMember{l.Name(), err}
			} else {
				err = fmt.Errorf("member %q: %w", l.Name(), err)
			}
			return nil, m.abort(held, err)
		}
		held = append(held, lockCtx)
		values = lockCtx
	}
	for i, lockCtx := range held {
		if lockCtx.Err() != nil {
			return nil, m.abort(held, &busyMember{m.members[i].Name(), context.Cause(lockCtx)})
		}
	}
	return held, nil
}

// step is the context member i is locked with: the values of values, the
// end of ctx, and in Lock, for every member after the first (whose wait
// holds nothing up), at most memberWait.
func (m *MultiLock) step(ctx, values context.Context, i int, try bool) (context.Context, context.CancelFunc) {
	if i == 0 {
		return ctx, func() {}
	}
	s, cancel := context.WithCancelCause(context.WithoutCancel(values))
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	deadline, ok := ctx.Deadline()
	if d := time.Now().Add(m.memberWait); !try && m.memberWait > 0 && (!ok || d.Before(deadline)) {
		deadline, ok = d, true
	}
	if !ok {
		return s, func() { stop(); cancel(nil) }
	}
	s, cancelDeadline := context.WithDeadline(s, deadline)
	return s, func() { stop(); cancelDeadline(); cancel(nil) }
}

// abort releases the members of a failed round, last first, and returns
// the round's error err, joined with any release that failed; such a
// failure is not worth another round.
func (m *MultiLock) abort(held []context.Context, err error) error {
	var errs []error
	for i := len(held) - 1; i >= 0; i-- {
		if rerr := m.unlockMember(i, held[i]); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			errs = append(errs, fmt.Errorf("releasing member %q: %w", m.members[i].Name(), rerr))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; %w", unwrapBusy(err), errors.Join(errs...))
	}
	return err
}

// unwrapBusy turns a busyMember into a plain error, so that the caller
// does not start another round.
func unwrapBusy(err error) error {
	if b, ok := err.(*busyMember); ok {
		return fmt.Errorf("member %q: %w", b.name, b.err)
	}
	return err
}

// hold builds the lock context of a successful round.
func (m *MultiLock) hold(held []context.Context) context.Context {
	lockCtx, cancel := context.WithCancelCause(context.WithoutCancel(held[len(held)-1]))
	hd := &multiHold{cancel: cancel, ctxs: held}
	for i, memberCtx := range held {
		name := m.members[i].Name()
		hd.stops = append(hd.stops, context.AfterFunc(memberCtx, func() {
			cancel(fmt.Errorf("dlock: multilock %q: member %q ended: %w", m.name, name, context.Cause(memberCtx)))
		}))
	}
	return context.WithValue(lockCtx, multiKey{m}, hd)
}

// Unlock releases every member of the hold lockCtx belongs to, last first;
// lockCtx ends with cause ErrUnlocked. A member that cannot be released is
// reported in the error (wrapping ErrNotHeld if it was lost) and, if the
// error is not that, is left to expire with its lease.
func (m *MultiLock) Unlock(lockCtx context.Context) error {
	if err := m.check(lockCtx); err != nil {
		return err
	}
	hd, ok := lockCtx.Value(multiKey{m}).(*multiHold)
	if !ok {
		return fmt.Errorf("%w: multilock %q: the context carries no hold of it; pass the context Lock returned", ErrNotHeld, m.name)
	}
	hd.mu.Lock()
	held := hd.ctxs
	hd.ctxs = nil
	hd.mu.Unlock()
	if held == nil {
		return fmt.Errorf("%w: multilock %q: already unlocked", ErrNotHeld, m.name)
	}
	// Stop watching first: the members' own ErrUnlocked is not news.
	for _, stop := range hd.stops {
		stop()
	}
	hd.cancel(ErrUnlocked)
	var errs []error
	for i := len(held) - 1; i >= 0; i-- {
		if err := m.unlockMember(i, held[i]); err != nil {
			errs = append(errs, fmt.Errorf("member %q: %w", m.members[i].Name(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("dlock: multilock %q: unlock: %w", m.name, errors.Join(errs...))
	}
	return nil
}

// unlockMember releases member i's hold, trying again after errors other
// than ErrNotHeld and ErrClosed. If it still fails, the member's hold is
// lost on purpose (loser) so that no watchdog keeps renewing a lock
// nobody will release.
func (m *MultiLock) unlockMember(i int, memberCtx context.Context) error {
	l := m.members[i]
	var err error
	for try := range multiReleaseTries {
		if try > 0 {
			time.Sleep(multiRetryDelay) // a pause before trying the server again
		}
		if err = l.Unlock(memberCtx); err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrClosed) {
			return err
		}
	}
	if f, ok := l.(loser); ok {
		f.lose(memberCtx)
	}
	return err
}
