package main

import "syscall"

// childProcAttr puts COMMAND in its own process group, so that it and what
// it starts can be signalled together, and has the kernel SIGKILL it if
// dlock dies: without dlock nobody renews the lock.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
