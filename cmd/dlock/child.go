//go:build unix

package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// waitDelay bounds how long COMMAND's output is still copied after it
// exits, when a process it started keeps the pipes open.
const waitDelay = 2 * time.Second

// child is COMMAND, running in its own process group.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when COMMAND has exited and been reaped
}

// startChild starts argv with env and the given streams. The error is an
// exit: 127 when the command is not found, 126 when it cannot be run.
func startChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = childProcAttr()
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			return nil, exitf(exitNotFound, "run: %s: command not found", argv[0])
		default:
			return nil, exitf(exitCannotExec, "run: cannot execute %s: %v", argv[0], unwrapExec(err))
		}
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(ch.done)
	}()
	return ch, nil
}

// unwrapExec drops the "fork/exec PATH: " that repeats the command name.
func unwrapExec(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// signal sends sig to COMMAND's process group.
func (ch *child) signal(sig syscall.Signal) {
	// The group id is the child's pid (Setpgid). ESRCH, when every
	// process of the group is gone, needs no handling.
	_ = syscall.Kill(-ch.cmd.Process.Pid, sig)
}

// stop sends SIGTERM to COMMAND's group and, unless COMMAND exits within
// grace, SIGKILL; it returns after COMMAND has exited and reports whether
// SIGKILL was needed. Signals that arrive meanwhile are forwarded. Once
// COMMAND has exited, what it left behind in its group is killed too: it
// must not go on without the lock.
func (ch *child) stop(grace time.Duration, sigs <-chan os.Signal) (killed bool) {
	ch.signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for {
		select {
		case sig := <-sigs:
			ch.signal(sig.(syscall.Signal))
			continue
		case <-ch.done:
		case <-timer.C:
			killed = true
		}
		break
	}
	ch.signal(syscall.SIGKILL)
	<-ch.done
	return killed
}

// exitCode is COMMAND's exit status as a shell reports it: 128+N when
// signal N ended it. Valid once done is closed.
func (ch *child) exitCode() int {
	st := ch.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return st.ExitCode()
}
