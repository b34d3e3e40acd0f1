// Package scripts holds dlock's Lua scripts, one file per operation. Each
// file documents its KEYS and ARGV in its header. Scripts run by EVALSHA and
// fall back to EVAL when the server answers NOSCRIPT (go-redis Script.Run).
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fence.lua
	fence string
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
)

// Reentrant lock (Redisson RLock) scripts.
var (
	LockAcquire   = redis.NewScript(fence + lockAcquire)
	LockRelease   = redis.NewScript(lockRelease)
	LockReleaseTo = redis.NewScript(fence + lockReleaseTo)
	LockRenew     = redis.NewScript(lockRenew)
	ForceRelease  = redis.NewScript(forceRelease)
)

// RedLock fencing: raise a node's token counter to the quorum's token.
var TokenRaise = redis.NewScript(tokenRaise)
