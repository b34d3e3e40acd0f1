//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts COMMAND in its own process group, so that it and what
// it starts can be signalled together.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
