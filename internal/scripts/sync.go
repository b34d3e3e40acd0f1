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
	//go:embed sem_try_set_ttl.lua
	semTrySetTTL string
	//go:embed sem_release_if_exists.lua
	semReleaseIfExists string

	//go:embed psem_clock.lua
	psemClock string
	//go:embed psem_reclaim.lua
	psemReclaim string
	//go:embed psem_acquire.lua
	psemAcquire string
	//go:embed psem_release.lua
	psemRelease string
	//go:embed psem_acquire_n.lua
	psemAcquireN string
	//go:embed psem_release_ids.lua
	psemReleaseIDs string
	//go:embed psem_release_to.lua
	psemReleaseTo string
	//go:embed psem_lease.lua
	psemLease string
	//go:embed psem_count.lua
	psemCount string
	//go:embed psem_lease_time.lua
	psemLeaseTime string
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

// Script is a synchronizer script with its source and whether running it
// twice does what running it once does. Scripts that are not idempotent
// must not be sent again by the Redis client after a lost reply; callers
// send them by EVALSHA and EVAL themselves, with go-redis' retries off.
type Script struct {
	*redis.Script
	Src        string
	Idempotent bool
}

func once(src string) Script       { return Script{newScript(src), src, false} }
func idempotent(src string) Script { return Script{newScript(src), src, true} }

// Counting semaphore (Redisson RSemaphore) scripts. SemTrySet serves the
// permit semaphore too: Redisson's two trySetPermits are the same. A
// repeated SemTrySet or SemDrain changes nothing more (its answer may
// differ: the first run's is lost anyway).
var (
	SemAcquire = once(semAcquire)
	SemRelease = once(semRelease)
	SemTrySet  = idempotent(semTrySet)
	SemAdd     = once(semAdd)
	SemDrain   = idempotent(semDrain)
	// SemTrySetTTL is SemTrySet with a time to live; SemReleaseIfExists
	// is SemRelease for a semaphore that exists.
	SemTrySetTTL       = idempotent(semTrySetTTL)
	SemReleaseIfExists = once(semReleaseIfExists)
)

// Permit semaphore (Redisson RPermitExpirableSemaphore) scripts. They share
// the KEYS (semaphore, timeout zset, channel) and ARGV[1..2] (the caller's
// clock, unread; publish command) of psem_reclaim.lua; those that read the
// time start with psem_clock.lua (the server's clock), those that reclaim
// expired permits first go on with psem_reclaim.lua. All but PsemAdd are
// idempotent: permits are named by ids the caller makes.
var (
	PsemAcquire = idempotent(psemClock + psemReclaim + psemAcquire)
	PsemRelease = idempotent(psemClock + psemRelease)
	// PsemReleaseTo releases a permit and hands it to a waiter of the
	// same Client (psem_release_to.lua).
	PsemReleaseTo = idempotent(psemClock + psemReleaseTo)
	PsemLease     = idempotent(psemClock + psemReclaim + psemLease)
	PsemCount     = idempotent(psemClock + psemReclaim + psemCount)
	PsemLeaseTime = idempotent(psemClock + psemReclaim + psemLeaseTime)
	PsemAdd       = once(psemAdd)
	PsemSet       = idempotent(psemSet)
	// PsemAcquireN takes n permits or none; PsemReleaseIDs gives back a
	// list of permits, all or none (Redisson's tryAcquire(n) and
	// tryRelease(list)).
	PsemAcquireN   = idempotent(psemClock + psemReclaim + psemAcquireN)
	PsemReleaseIDs = idempotent(psemClock + psemReclaim + psemReleaseIDs)
)

// Count-down latch (Redisson RCountDownLatch) scripts.
var (
	LatchTrySet    = idempotent(latchTrySet)
	LatchCountDown = once(latchCountDown)
	LatchDelete    = idempotent(latchDelete)
)
