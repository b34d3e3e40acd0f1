package scripts

import _ "embed"

var (
	//go:embed fair_queue.lua
	fairQueue string
	//go:embed fair_acquire.lua
	fairAcquire string
	//go:embed fair_release.lua
	fairRelease string
	//go:embed fair_leave.lua
	fairLeave string
	//go:embed fair_force_release.lua
	fairForceRelease string
	//go:embed fair_clear.lua
	fairClear string
)

// Fair lock (Redisson FairLock) scripts. Each one starts with the queue
// rules of fair_queue.lua, so that they are written once.
var (
	FairAcquire      = newScript(fence + fairQueue + fairAcquire)
	FairRelease      = newScript(fence + fairQueue + fairRelease)
	FairLeave        = newScript(fairQueue + fairLeave)
	FairForceRelease = newScript(fairQueue + fairForceRelease)
)

// FairClear deletes a fair lock's queue and wakes its waiters (dlock
// clear-queue).
var FairClear = newScript(fairClear)
