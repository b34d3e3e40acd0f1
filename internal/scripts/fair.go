package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fair_queue.lua
	fairQueue string
	//go:embed fair_acquire.lua
	fairAcquire string
	//go:embed fair_release.lua
	fairRelease string
	//go:embed fair_abandon.lua
	fairAbandon string
	//go:embed fair_force_release.lua
	fairForceRelease string
)

// Fair lock (Redisson FairLock) scripts. Each one starts with the queue
// rules of fair_queue.lua, so that they are written once.
var (
	FairAcquire      = redis.NewScript(fence + fairQueue + fairAcquire)
	FairRelease      = redis.NewScript(fairQueue + fairRelease)
	FairAbandon      = redis.NewScript(fairQueue + fairAbandon)
	FairForceRelease = redis.NewScript(fairQueue + fairForceRelease)
)
