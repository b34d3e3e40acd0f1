package redisserver

import "syscall"

// sysProcAttr puts the child in its own process group, so that a Ctrl-C
// meant for the parent does not reach it, and has the kernel SIGKILL it
// when the parent dies, even if that crashes or is killed before it can
// close its servers.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
