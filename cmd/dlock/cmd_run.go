package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

var runUsage = `Usage: dlock run [flags] NAME -- COMMAND [ARGS...]

Takes lock NAME, runs COMMAND while holding it, releases it when COMMAND
exits, and exits with COMMAND's exit status. Without --lease, a watchdog
renews the lock every third of --watchdog while COMMAND runs, so a lock
whose holder dies is free again within --watchdog.

COMMAND gets dlock's environment plus:
  DLOCK_NAME    the lock name
  DLOCK_OWNER   the owner, "<clientUUID>:<n>": this holder's field in the lock hash
  DLOCK_TOKEN   the fencing token (with --fencing only)

COMMAND runs in its own process group, as with timeout(1). SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to dlock are forwarded to that group. If the lock
is lost while COMMAND runs (deleted, taken over, expired, not renewed in
time), dlock sends SIGTERM to the group, SIGKILL after --grace, and exits
with status 6. If dlock itself is killed, COMMAND gets SIGKILL (Linux).

Flags:
  --wait DURATION      give up after waiting DURATION (exit 3); 0 tries once.
                       Default: wait as long as it takes
  --lease DURATION     fixed lease, no watchdog: COMMAND is stopped when it runs out
  --kind KIND          lock kind: ` + kindList + ` (default mutex)
  --fencing            take a fencing token, passed as DLOCK_TOKEN
  --grace DURATION     time COMMAND has between SIGTERM and SIGKILL when the lock
                       is lost (default 5s)
  --watchdog DURATION  lease of a lock held without --lease; renewed every third
                       of it (default 30s)
  -v                   say on stderr when the lock is taken and released
  --redis URL          see Connection; 3 or 5 times for a RedLock (--kind mutex)

` + connectionHelp + "\n" + exitHelp

// kindList is how the usage texts list the kinds.
var kindList = strings.Join(kinds, " | ")

// childEnv are the variables dlock sets for COMMAND; inherited values are
// dropped so that a nested dlock run never passes on its parent's.
var childEnv = []string{"DLOCK_NAME", "DLOCK_OWNER", "DLOCK_TOKEN"}

// runArgs is a parsed dlock run command line.
type runArgs struct {
	eps      []endpoint
	name     string
	argv     []string // COMMAND and its arguments
	wait     optDuration
	lease    optDuration
	kind     string
	fencing  bool
	grace    time.Duration
	watchdog time.Duration
	verbose  bool
}

// parseRun reads the command line of dlock run without acting on it.
func (c *cli) parseRun(args []string) (runArgs, error) {
	fs := newFlagSet("run")
	conn := addConnFlags(fs)
	var a runArgs
	fs.Var(&a.wait, "wait", "")
	fs.Var(&a.lease, "lease", "")
	fs.StringVar(&a.kind, "kind", "mutex", "")
	fs.BoolVar(&a.fencing, "fencing", false, "")
	fs.DurationVar(&a.grace, "grace", 5*time.Second, "")
	fs.DurationVar(&a.watchdog, "watchdog", dlock.DefaultWatchdogTimeout, "")
	fs.BoolVar(&a.verbose, "v", false, "")

	before, argv, found := cutArgs(args, "--")
	pos, err := c.parse(fs, runUsage, before)
	if err != nil {
		return a, err
	}
	switch {
	case len(pos) == 0:
		return a, usageError("run: missing lock NAME; usage: dlock run [flags] NAME -- COMMAND [ARGS...]")
	case len(pos) > 1:
		return a, usageError("run: one lock NAME expected, got %d arguments before \"--\" (%q); usage: dlock run [flags] NAME -- COMMAND [ARGS...]", len(pos), pos)
	case !found:
		return a, usageError("run: missing \"--\" before COMMAND; usage: dlock run [flags] NAME -- COMMAND [ARGS...]")
	case len(argv) == 0:
		return a, usageError("run: missing COMMAND after \"--\"")
	case a.grace < 0:
		return a, usageError("run: --grace must not be negative")
	case a.lease.set && a.lease.d == 0:
		return a, usageError("run: --lease must be positive")
	}
	a.name, a.argv = pos[0], argv
	a.eps, err = c.endpoints(conn)
	return a, err
}

func (c *cli) runCmd(ctx context.Context, args []string) error {
	a, err := c.parseRun(args)
	if err != nil {
		return err
	}
	name, argv := a.name, a.argv
	var opts []dlock.LockOption
	if a.lease.set {
		opts = append(opts, dlock.WithLease(a.lease.d))
	}
	if a.fencing {
		opts = append(opts, dlock.WithFencing())
	}
	s, err := openSession(a.eps, dlock.WithWatchdogTimeout(a.watchdog))
	if err != nil {
		return err
	}
	defer s.close()
	lk, err := s.newLocker(a.kind, name, opts...)
	if err != nil {
		return optionError("run", err)
	}
	if err := s.ping(ctx); err != nil {
		return err
	}

	// Signals are caught from here on: while waiting they abort the wait,
	// later they are forwarded to COMMAND.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	start := time.Now()
	lockCtx, err := acquire(ctx, lk, a.wait, sigs)
	if err != nil {
		return lockError(name, a.wait, err)
	}
	owner, _ := s.clients[0].Owner(lockCtx)
	env := append(withoutVars(os.Environ(), childEnv), "DLOCK_NAME="+name, "DLOCK_OWNER="+owner)
	token, fenced := dlock.Token(lockCtx)
	if fenced {
		env = append(env, "DLOCK_TOKEN="+strconv.FormatInt(token, 10))
	}
	if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: acquired %q after %v (owner %s%s)\n", name, time.Since(start).Round(time.Millisecond), owner, tokenNote(token, fenced))
	}

	ch, err := startChild(argv, env, c.stdin, c.stdout, c.stderr)
	if err != nil {
		_ = release(lk, lockCtx)
		return err
	}
	for {
		select {
		case sig := <-sigs:
			ch.signal(sig.(syscall.Signal))
			continue
		case <-ch.done:
		case <-lockCtx.Done():
			return c.lockLost(lockCtx, name, argv[0], ch, a.grace, sigs)
		}
		break
	}
	code := ch.exitCode()
	if err := release(lk, lockCtx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) || errors.Is(context.Cause(lockCtx), dlock.ErrLockLost) {
			return exitf(exitLockLost, "lock %q was lost before %s exited (it exited with status %d); it may have run without the lock", name, argv[0], code)
		}
		fmt.Fprintf(c.stderr, "dlock: releasing %q: %v; it frees itself when its lease runs out\n", name, trimPrefix(err))
	} else if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: released %q; %s exited with status %d\n", name, argv[0], code)
	}
	return &exitError{code: code}
}

// acquire takes the lock: once with --wait 0, for up to --wait with a
// positive one, else as long as it takes. A signal aborts the wait.
func acquire(ctx context.Context, lk locker, wait optDuration, sigs <-chan os.Signal) (context.Context, error) {
	sigCtx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-sigs:
			cancel(signalError{sig.(syscall.Signal)})
		case <-sigCtx.Done():
		}
	}()
	waitCtx := sigCtx
	if wait.set && wait.d > 0 {
		var stop context.CancelFunc
		waitCtx, stop = context.WithTimeout(sigCtx, wait.d)
		defer stop()
	}
	var lockCtx context.Context
	var err error
	if wait.set && wait.d == 0 {
		lockCtx, err = lk.TryLock(waitCtx)
	} else {
		lockCtx, err = lk.Lock(waitCtx)
	}
	cancel(nil)
	<-watched
	// A signal that came as the lock was taken still means "stop": COMMAND
	// has not started yet.
	var se signalError
	if errors.As(context.Cause(sigCtx), &se) {
		if err == nil {
			_ = release(lk, lockCtx)
		}
		return nil, se
	}
	return lockCtx, err
}

// signalError reports that a signal ended the wait for a lock.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + signalName(e.sig) }

// lockError turns a failed acquisition into an exit.
func lockError(name string, wait optDuration, err error) error {
	var se signalError
	switch {
	case errors.As(err, &se):
		return exitf(exitSignalBase+int(se.sig), "gave up waiting for lock %q: %v", name, se)
	case errors.Is(err, dlock.ErrNotObtained) && wait.set && wait.d == 0:
		return exitf(exitNotObtained, "lock %q is held by another owner (--wait 0)%s", name, quorumNote(err))
	case errors.Is(err, dlock.ErrNotObtained) && wait.set:
		return exitf(exitNotObtained, "lock %q not obtained within --wait %v%s", name, wait.d, quorumNote(err))
	case errors.Is(err, dlock.ErrNotObtained):
		return exitf(exitNotObtained, "%s", trimPrefix(err))
	}
	return redisError(fmt.Sprintf("taking lock %q", name), err)
}

// quorumNote is, for a RedLock, what each server that refused said.
func quorumNote(err error) string {
	var qe *dlock.QuorumError
	if errors.As(err, &qe) {
		return " (" + qe.Error() + ")"
	}
	return ""
}

// lockLost stops COMMAND after the lock was lost under it.
func (c *cli) lockLost(lockCtx context.Context, name, cmd string, ch *child, grace time.Duration, sigs <-chan os.Signal) error {
	fmt.Fprintf(c.stderr, "dlock: %s; stopping %s: SIGTERM now, SIGKILL in %v\n", trimPrefix(context.Cause(lockCtx)), cmd, grace)
	if ch.stop(grace, sigs) {
		fmt.Fprintf(c.stderr, "dlock: %s did not exit within %v of SIGTERM; killed it\n", cmd, grace)
	}
	return exitf(exitLockLost, "lock %q was lost while %s ran; %s was stopped (it exited with status %d)", name, cmd, cmd, ch.exitCode())
}

// release gives the lock back. Unlock reaches Redis even when lockCtx is
// cancelled; go-redis's timeouts bound it.
func release(lk locker, lockCtx context.Context) error {
	return lk.Unlock(lockCtx)
}

// cutArgs splits args at the first sep.
func cutArgs(args []string, sep string) (before, after []string, found bool) {
	for i, a := range args {
		if a == sep {
			return args[:i], args[i+1:], true
		}
	}
	return args, nil, false
}

// withoutVars returns env without the variables named in names.
func withoutVars(env, names []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

func tokenNote(token int64, fenced bool) string {
	if !fenced {
		return ""
	}
	return fmt.Sprintf(", token %d", token)
}

// trimPrefix returns err's message without the "dlock: " that the CLI's
// own report adds again.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "dlock: ")
}
