//go:build unix && !linux

package redisserver

import "syscall"

// sysProcAttr puts the child in its own process group. Pdeathsig exists
// only on Linux, so here a crashed parent may leave servers running.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
