// Package scripts holds dlock's Lua scripts, one file per operation. Each
// file documents its KEYS and ARGV in its header. Scripts run by EVALSHA and
// fall back to EVAL when the server answers NOSCRIPT (go-redis Script.Run).
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lock_acquire.lua
	lockAcquire string
	//go:embed lock_release.lua
	lockRelease string
	//go:embed lock_renew.lua
	lockRenew string
	//go:embed force_release.lua
	forceRelease string
)

// Reentrant lock (Redisson RLock) scripts.
var (
	LockAcquire  = redis.NewScript(lockAcquire)
	LockRelease  = redis.NewScript(lockRelease)
	LockRenew    = redis.NewScript(lockRenew)
	ForceRelease = redis.NewScript(forceRelease)
)
