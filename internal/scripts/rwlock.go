package scripts

import _ "embed"

var (
	//go:embed rw_read_acquire.lua
	rwReadAcquire string
	//go:embed rw_read_release.lua
	rwReadRelease string
	//go:embed rw_read_renew.lua
	rwReadRenew string
	//go:embed rw_write_acquire.lua
	rwWriteAcquire string
	//go:embed rw_write_release.lua
	rwWriteRelease string
	//go:embed rw_force_release.lua
	rwForceRelease string
)

// Read-write lock (Redisson ReadWriteLock) scripts. The write half is
// renewed by LockRenew, like every lock with one hash field per owner.
var (
	RWReadAcquire  = newScript(fence + rwReadAcquire)
	RWReadRelease  = newScript(rwReadRelease)
	RWReadRenew    = newScript(rwReadRenew)
	RWWriteAcquire = newScript(fence + rwWriteAcquire)
	RWWriteRelease = newScript(rwWriteRelease)
	RWForceRelease = newScript(rwForceRelease)
)
