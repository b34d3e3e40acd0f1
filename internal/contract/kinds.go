package contract

// The kinds the contract runs on, and how to make their handles.

import (
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
)

// kind says how to make the handles of one lock kind.
type kind struct {
	name string
	// open makes a handle on lock name on cs (one Client per deployment).
	open func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error)
	// rival, when set, makes the handle that excludes open's (a reader's
	// rival is a writer); open's own by default.
	rival func(cs []*dlock.Client, name string) (dlock.Locker, error)
	// keys are what a hold of lock name puts in Redis, on every
	// deployment.
	keys func(name string) []string
	// channel is the channel a waiter for lock name subscribes to first
	// (a pattern of PUBSUB CHANNELS), or nil when the kind polls.
	channel func(name string) string
	// zero is the kind's zero value, which must refuse every call.
	zero dlock.Locker
	// foreign is an option of another kind, which the kind must refuse.
	foreign dlock.LockOption
	// noReentry is set for kinds that refuse re-entry (WithoutReentry):
	// the re-entry rules are inverted.
	noReentry bool
}

func lockKey(name string) []string { return []string{name} }

func lockChannel(name string) string { return layout.Prefixed(layout.LockChannelPrefix, name) }

// fairChannel is a fair waiter's channel: the lock channel and its owner.
func fairChannel(name string) string { return lockChannel(name) + ":*" }

func rwChannel(name string) string { return layout.Prefixed(layout.RWChannelPrefix, name) }

// rwHalf opens the write or the read half of an RWMutex.
func rwHalf(write bool) func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
	return func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
		rw, err := cs[0].NewRWMutex(name, opts...)
		switch {
		case err != nil:
			return nil, err
		case write:
			return rw.WriteLock(), nil
		}
		return rw.ReadLock(), nil
	}
}

// oneDeploymentKinds are the kinds that live on one deployment.
func oneDeploymentKinds() []kind {
	return []kind{{
		name: "Mutex",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return cs[0].NewMutex(name, opts...)
		},
		keys:    lockKey,
		channel: lockChannel,
		zero:    &dlock.Mutex{},
		foreign: dlock.WithNodeTimeout(time.Millisecond),
	}, {
		name: "FairMutex",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return cs[0].NewFairMutex(name, opts...)
		},
		keys:    lockKey,
		channel: fairChannel,
		zero:    &dlock.FairMutex{},
		foreign: dlock.WithNodeTimeout(time.Millisecond),
	}, {
		name: "SpinLock",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return cs[0].NewSpinLock(name, opts...)
		},
		keys:    lockKey, // no channel: the kind polls
		zero:    &dlock.SpinLock{},
		foreign: dlock.WithFairWaitTimeout(time.Second),
	}, {
		name: "Mutex/WithoutReentry",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return cs[0].NewMutex(name, append(opts, dlock.WithoutReentry())...)
		},
		keys:      lockKey,
		channel:   lockChannel,
		zero:      &dlock.Mutex{},
		foreign:   dlock.WithBackoff(time.Millisecond, time.Millisecond),
		noReentry: true,
	}, {
		name: "FairMutex/WithoutReentry",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return cs[0].NewFairMutex(name, append(opts, dlock.WithoutReentry())...)
		},
		keys:      lockKey,
		channel:   fairChannel,
		zero:      &dlock.FairMutex{},
		foreign:   dlock.WithNodeTimeout(time.Millisecond),
		noReentry: true,
	}, {
		name:    "ReadLock",
		open:    rwHalf(false),
		rival:   func(cs []*dlock.Client, name string) (dlock.Locker, error) { return rwHalf(true)(cs, name) },
		keys:    lockKey,
		channel: rwChannel,
		zero:    &dlock.ReadLock{},
		foreign: dlock.WithFairWaitTimeout(time.Second),
	}, {
		name:    "WriteLock",
		open:    rwHalf(true),
		keys:    lockKey,
		channel: rwChannel,
		zero:    &dlock.WriteLock{},
		foreign: dlock.WithFairWaitTimeout(time.Second),
	}, {
		name: "MultiLock",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			a, err := cs[0].NewMutex(name+":a", opts...)
			if err != nil {
				return nil, err
			}
			b, err := cs[0].NewFairMutex(name+":b", opts...)
			if err != nil {
				return nil, err
			}
			return dlock.NewMultiLock(a, b)
		},
		keys:    func(name string) []string { return []string{name + ":a", name + ":b"} },
		channel: func(name string) string { return lockChannel(name + ":a") },
		zero:    &dlock.MultiLock{},
	}}
}

// redLockKind is RedLock, on one Client per server.
func redLockKind() kind {
	return kind{
		name: "RedLock",
		open: func(cs []*dlock.Client, name string, opts ...dlock.LockOption) (dlock.Locker, error) {
			return dlock.NewRedLock(cs, name, opts...)
		},
		keys:    lockKey,
		zero:    &dlock.RedLock{},
		foreign: dlock.WithFairWaitTimeout(time.Second),
	}
}
