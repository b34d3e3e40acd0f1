package main

import "fmt"

// Exit codes; exitHelp in cli.go documents them for users.
const (
	exitOK          = 0
	exitFailure     = 1 // a Redis command failed, or the user declined
	exitUsage       = 2 // bad command, flag, argument or URL
	exitNotObtained = 3 // the lock was not obtained within --wait
	exitUnreachable = 4 // Redis could not be reached
	exitAuth        = 5 // Redis refused the credentials
	exitLockLost    = 6 // run: the lock was lost while the command ran
	exitDeadlock    = 7 // deadlocks: a wait-for cycle was found
	exitCannotExec  = 126
	exitNotFound    = 127
	exitSignalBase  = 128 // + signal number
)

// exitError is an error that ends dlock with a given exit code. Its
// message is printed as one line on stderr; an empty message prints
// nothing.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// errHelp ends a command whose help was asked for (-h) with success.
var errHelp = &exitError{code: exitOK}

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func usageError(format string, args ...any) error {
	return exitf(exitUsage, format, args...)
}
