package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child when the test binary exits,
// even if it crashes or is killed before it can close its servers.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
