// Package scripts holds dlock's Lua scripts, one file per operation. Each
// file documents its KEYS and ARGV in its header. Scripts run by EVALSHA and
// fall back to EVAL with Source when the server answers NOSCRIPT.
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fence.lua
	fence string
	//go:embed lock_acquire_free.lua
	lockAcquireFree string
	//go:embed lock_acquire.lua
	lockAcquire string
	//go:embed lock_release.lua
	lockRelease string
	//go:embed lock_release_to.lua
	lockReleaseTo string
	//go:embed lock_renew.lua
	lockRenew string
	//go:embed force_release.lua
	forceRelease string
	//go:embed token_raise.lua
	tokenRaise string
	//go:embed fenced_write.lua
	fencedWrite string
	//go:embed spin_release.lua
	spinRelease string
	//go:embed spin_force_release.lua
	spinForceRelease string
)

// Reentrant lock (Redisson RLock) scripts.
var (
	LockAcquire   = newScript(lockAcquireFree + fence + lockAcquire)
	LockRelease   = newScript(lockRelease)
	LockReleaseTo = newScript(fence + lockReleaseTo)
	LockRenew     = newScript(lockRenew)
	ForceRelease  = newScript(forceRelease)
)

// Spin lock (Redisson RSpinLock) scripts: RLock's acquire (LockAcquire)
// and renewal, and releases that publish nothing.
var (
	SpinRelease      = newScript(spinRelease)
	SpinForceRelease = newScript(spinForceRelease)
)

// RedLock fencing: raise a node's token counter to the quorum's token.
var TokenRaise = newScript(tokenRaise)

// FencedWrite is the storage side of fencing for data kept in Redis: a
// SET or HSET that refuses a token below the highest one seen.
var FencedWrite = newScript(fencedWrite)

// sources maps each script of this package to its Lua source. It is
// written only while the package initialises.
var sources = map[*redis.Script]string{}

func newScript(src string) *redis.Script {
	s := redis.NewScript(src)
	sources[s] = src
	return s
}

// Source returns the Lua source of one of this package's scripts, for the
// EVAL that follows a NOSCRIPT reply; "" for any other script.
func Source(s *redis.Script) string { return sources[s] }
