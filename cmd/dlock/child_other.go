//go:build !unix

package main

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// child is COMMAND; dlock run needs process groups, which only Unix has.
type child struct {
	done chan struct{}
}

func startChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	return nil, exitf(exitCannotExec, "run: %v", errors.New("dlock run needs a Unix system (process groups and signals)"))
}

func (ch *child) signal(syscall.Signal)                     {}
func (ch *child) stop(time.Duration, <-chan os.Signal) bool { return false }
func (ch *child) exitCode() int                             { return exitFailure }
