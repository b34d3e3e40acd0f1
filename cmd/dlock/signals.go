package main

import (
	"strconv"
	"syscall"
)

// signalName names the signals dlock handles the way people write them.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return "signal " + strconv.Itoa(int(sig))
}
