//go:build !unix

package redisserver

import (
	"os"
	"syscall"
)

// sysProcAttr has nothing to add outside Unix.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// Pause and Resume do nothing outside Unix.
var sigStop, sigCont os.Signal
