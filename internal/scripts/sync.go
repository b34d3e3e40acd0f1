package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed sem_acquire.lua
	semAcquire string
	//go:embed sem_release.lua
	semRelease string
	//go:embed sem_try_set.lua
	semTrySet string
	//go:embed sem_add.lua
	semAdd string
	//go:embed sem_drain.lua
	semDrain string

	//go:embed psem_reclaim.lua
	psemReclaim string
	//go:embed psem_acquire.lua
	psemAcquire string
	//go:embed psem_release.lua
	psemRelease string
	//go:embed psem_lease.lua
	psemLease string
	//go:embed psem_count.lua
	psemCount string
	//go:embed psem_add.lua
	psemAdd string
	//go:embed psem_set.lua
	psemSet string

	//go:embed latch_try_set.lua
	latchTrySet string
	//go:embed latch_count_down.lua
	latchCountDown string
	//go:embed latch_delete.lua
	latchDelete string
)

// Counting semaphore (Redisson RSemaphore) scripts. SemTrySet serves the
// permit semaphore too: Redisson's two trySetPermits are the same.
var (
	SemAcquire = redis.NewScript(semAcquire)
	SemRelease = redis.NewScript(semRelease)
	SemTrySet  = redis.NewScript(semTrySet)
	SemAdd     = redis.NewScript(semAdd)
	SemDrain   = redis.NewScript(semDrain)
)

// Permit semaphore (Redisson RPermitExpirableSemaphore) scripts. They share
// the KEYS (semaphore, timeout zset, channel) and ARGV[1..2] (now, publish
// command) of psem_reclaim.lua; those that reclaim expired permits first
// start with it.
var (
	PsemAcquire = redis.NewScript(psemReclaim + psemAcquire)
	PsemRelease = redis.NewScript(psemRelease)
	PsemLease   = redis.NewScript(psemReclaim + psemLease)
	PsemCount   = redis.NewScript(psemReclaim + psemCount)
	PsemAdd     = redis.NewScript(psemAdd)
	PsemSet     = redis.NewScript(psemSet)
)

// Count-down latch (Redisson RCountDownLatch) scripts.
var (
	LatchTrySet    = redis.NewScript(latchTrySet)
	LatchCountDown = redis.NewScript(latchCountDown)
	LatchDelete    = redis.NewScript(latchDelete)
)
