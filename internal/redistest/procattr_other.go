//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: Pdeathsig exists only on Linux, so elsewhere a
// crashed test binary may leave servers running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
