package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
)

var runUsage = `Usage: dlock run [flags] NAME COMMAND [ARGS...]
       dlock run [flags] NAME -c 'SHELL COMMAND'
       dlock run --permits N [flags] NAME COMMAND [ARGS...]

Takes lock NAME, runs COMMAND while holding it, releases it when COMMAND
exits, and exits with COMMAND's exit status. Flags go before NAME; the
first word after NAME starts COMMAND ("--" before COMMAND is accepted).
Without --lease, a watchdog renews the lock every third of --watchdog
while COMMAND runs, so a lock whose holder dies (kill -9, a crashed
machine) is free again within --watchdog: 10s by default, not the
library's 30s. A dlock process is small and has no garbage-collection
pauses worth 30s to ride out, so the shorter lease only makes a dead
holder's lock come back sooner; give --watchdog 30s (or more) when Redis
or the network can stall for several seconds, since a lock not renewed
within --watchdog is lost and COMMAND stopped.

With --permits N, NAME is a permit semaphore (Redisson's
RPermitExpirableSemaphore) instead of a lock: dlock takes one of its
permits, so that at most N COMMANDs run at once across every machine that
uses NAME. A semaphore that does not exist is set to N permits; one that
does is used as it is (dlock says so when its total is not N). The permit
has a lease renewed like a lock's, so the permit of a dlock that dies
comes back within --watchdog; --permit-lease D fixes it, --permit-lease
none takes a permit that never expires. -w, -n, -E, --lease and the loss
rules below apply to it as to a lock.

COMMAND gets dlock's environment plus:
  DLOCK_NAME    the lock name
  DLOCK_OWNER   the owner, "<clientUUID>:<n>": this holder's field in the lock hash
  DLOCK_TOKEN   the fencing token (with --fencing only)
  DLOCK_PERMIT  the permit's id, 32 hex digits (with --permits, instead of
                DLOCK_OWNER)

COMMAND runs in its own process group, as with timeout(1). SIGINT, SIGTERM,
SIGHUP and SIGQUIT sent to dlock are forwarded to that group. If the lock
is lost while COMMAND runs (deleted, taken over, expired, not renewed in
time), dlock sends SIGTERM to the group, SIGKILL after --grace, and exits
with status 6. If dlock itself is killed, COMMAND gets SIGKILL (Linux).

Flags:
` + lockFlagsHelp + `  -c, --command STRING       run STRING with sh -c instead of COMMAND
  --grace DURATION           time COMMAND has between SIGTERM and SIGKILL when the
                             lock is lost (default 5s)

` + seeHelp

// lockFlagsHelp documents the flags run and hold share (lockFlags).
var lockFlagsHelp = `  -w, --wait DURATION        give up after DURATION, connecting to Redis included;
                             0 tries once. A bare number is seconds (-w 5, -w 0.5),
                             as with flock. Default: wait as long as it takes
  -n, --nonblock             fail at once if the lock is held (same as -w 0)
                             Redis must answer the connection check within 1s with
                             -n, within --wait (1s to 5s) with -w, else within 5s;
                             if not, dlock exits 4 (unreachable)
  -E, --conflict-exit-code N exit status when the lock is not obtained (default 3)
  --lease DURATION           fixed lease, no watchdog: the lock ends when it runs out
  --kind KIND                lock kind: ` + kindList + ` (default mutex)
  -s, --shared               a shared lock, as flock -s: --kind read, a read lock of
                             the read-write lock NAME; -s holders share NAME
  -x, --exclusive            an exclusive lock, as flock -x: --kind write, the write
                             lock of NAME, which excludes -s holders and other -x
                             holders. Without -s or -x NAME is a mutex: it excludes
                             -s and -x holders too, but a waiter of one kind is woken
                             by a release of the other only when it next polls (at
                             most --watchdog later), so use -x wherever -s is used
  --spin                     a spin lock: the mutex NAME, waited for by polling with a
                             backoff (1ms doubling to 128ms) instead of an unlock
                             message, for Redis setups where pub/sub does not pass
                             or costs too much; excludes mutex holders as usual,
                             but its release publishes nothing: a mutex waiter on
                             NAME is not woken by it and waits out its sleep (the
                             lease)
  --fencing                  take a fencing token, passed as DLOCK_TOKEN
  --watchdog DURATION        lease of a lock held without --lease; renewed every
                             third of it (default 10s; see "dlock help run")
  --label TEXT               what dlock status and list show for this holder, with
                             host and pid (default: COMMAND for run, "hold" for hold)
  --permits N                take a permit of the permit semaphore NAME, which has N
                             permits (set to N if it does not exist), not a lock
  --permit-lease D|none      with --permits: a fixed lease D for the permit, not
                             renewed (as --lease); none: a permit that never expires
                             (Redisson's acquire() without lease), given back when
                             COMMAND exits, kept for good if dlock is killed
  -v                         say on stderr when the lock is taken and released, and
                             show go-redis's own log lines ("dlock: debug: redis:
                             connection pool: failed to dial ...")
  --redis URL                the Redis deployment; 3 or 5 times for a RedLock
`

// cliWatchdogTimeout is the lease of a lock that run and hold take
// without --lease: a third of the library's DefaultWatchdogTimeout, so
// that the lock of a dlock killed with SIGKILL is free again within 10s
// (flock's lock goes with its process at once). The library's 30s allows
// for long garbage-collection pauses of big services; a dlock process has
// none worth that.
const cliWatchdogTimeout = 10 * time.Second

// kindList is how the usage texts list the kinds.
var kindList = strings.Join(kinds, " | ")

// childEnv are the variables dlock sets for COMMAND; inherited values are
// dropped so that a nested dlock run never passes on its parent's.
var childEnv = []string{"DLOCK_NAME", "DLOCK_OWNER", "DLOCK_TOKEN", "DLOCK_PERMIT"}

// lockFlags are the flags of run and hold: which lock, and how to take it.
type lockFlags struct {
	eps          []endpoint
	name         string
	wait         optDuration
	nonblock     bool
	conflictCode int
	lease        optDuration
	kind         string    // --kind, or what -s or -x stands for; mutex by default
	kindFlag     optString // --kind as given
	shared       bool      // -s: --kind read, as flock -s
	exclusive    bool      // -x: --kind write, as flock -x
	fencing      bool
	spin         bool // --spin: a SpinLock
	watchdog     time.Duration
	verbose      bool
	label        optString // the Client's name (WithClientName)
	permits      optInt    // take a permit of a permit semaphore with this many permits
	permitLease  optString // --permit-lease: a duration, or "none"
	conn         *connFlags
}

// define defines the flags on fs.
func (a *lockFlags) define(fs *flag.FlagSet) {
	a.conn = addConnFlags(fs)
	fs.Var(&a.wait, "wait", "")
	fs.Var(&a.wait, "w", "")
	fs.BoolVar(&a.nonblock, "nonblock", false, "")
	fs.BoolVar(&a.nonblock, "n", false, "")
	fs.IntVar(&a.conflictCode, "conflict-exit-code", exitNotObtained, "")
	fs.IntVar(&a.conflictCode, "E", exitNotObtained, "")
	fs.Var(&a.lease, "lease", "")
	fs.Var(&a.kindFlag, "kind", "")
	fs.BoolVar(&a.shared, "shared", false, "")
	fs.BoolVar(&a.shared, "s", false, "")
	fs.BoolVar(&a.exclusive, "exclusive", false, "")
	fs.BoolVar(&a.exclusive, "x", false, "")
	fs.BoolVar(&a.fencing, "fencing", false, "")
	fs.BoolVar(&a.spin, "spin", false, "")
	fs.Var(newDurationFlag(&a.watchdog, cliWatchdogTimeout), "watchdog", "")
	fs.BoolVar(&a.verbose, "v", false, "")
	fs.Var(&a.label, "label", "")
	fs.Var(&a.permits, "permits", "")
	fs.Var(&a.permitLease, "permit-lease", "")
}

// check validates the flags once parsed, and reads the endpoints.
func (a *lockFlags) check(c *cli, cmd string) error {
	kindFrom := "--kind " + a.kindFlag.s
	a.kind = a.kindFlag.s
	switch {
	case a.shared && a.exclusive:
		return usageError("%s: -s (--shared) and -x (--exclusive) cannot be combined", cmd)
	case (a.shared || a.exclusive) && a.kindFlag.set:
		return usageError("%s: -s and -x choose the kind (read, write); give them without --kind", cmd)
	case a.shared:
		a.kind, kindFrom = "read", "-s"
	case a.exclusive:
		a.kind, kindFrom = "write", "-x"
	case !a.kindFlag.set:
		a.kind = "mutex"
	}
	switch {
	case a.nonblock && a.wait.set:
		return usageError("%s: -n (--nonblock) and -w (--wait) cannot be combined", cmd)
	case a.lease.set && a.lease.d == 0:
		return usageError("%s: --lease must be positive", cmd)
	case a.conflictCode < 0 || a.conflictCode > 255:
		return usageError("%s: --conflict-exit-code %d is outside 0..255", cmd, a.conflictCode)
	case a.permits.set && a.permits.n < 1:
		return usageError("%s: --permits must be at least 1", cmd)
	case a.permits.set && a.kind != "mutex":
		return usageError("%s: --permits takes a permit of a semaphore; %s names a lock", cmd, kindFrom)
	case a.permits.set && a.fencing:
		return usageError("%s: --fencing is for locks; a permit has no fencing token", cmd)
	case a.permitLease.set && !a.permits.set:
		return usageError("%s: --permit-lease is the lease of a permit; it needs --permits", cmd)
	case a.permitLease.set && a.lease.set:
		return usageError("%s: --permit-lease and --lease cannot be combined", cmd)
	case a.spin && (a.kind != "mutex" || a.permits.set):
		return usageError("%s: --spin takes a spin lock, which is a mutex; it does not combine with %s", cmd, spinConflict(a, kindFrom))
	}
	if _, err := a.permitLeaseOf(); err != nil {
		return usageError("%s: %v", cmd, err)
	}
	if a.nonblock {
		a.wait = optDuration{set: true}
	}
	if a.verbose {
		c.log().verbose()
	}
	var err error
	a.eps, err = c.endpoints(a.conn)
	if err == nil && a.spin && len(a.eps) > 1 {
		return usageError("%s: --spin needs one Redis deployment; several --redis make a RedLock, which polls already", cmd)
	}
	return err
}

// newLocker returns the handle on the lock the flags describe: a SpinLock
// with --spin (one deployment, checked above), else the --kind's.
func (a *lockFlags) newLocker(s *session) (locker, error) {
	if a.spin {
		return s.clients[0].NewSpinLock(a.name, a.lockOptions()...)
	}
	return s.newLocker(a.kind, a.name, a.lockOptions()...)
}

// spinConflict names the flag that --spin does not combine with.
func spinConflict(a *lockFlags, kindFrom string) string {
	if a.permits.set {
		return "--permits"
	}
	return kindFrom
}

// lockOptions are the options of the lock the flags describe.
func (a *lockFlags) lockOptions() []dlock.LockOption {
	var opts []dlock.LockOption
	if a.lease.set {
		opts = append(opts, dlock.WithLease(a.lease.d))
	}
	if a.fencing {
		opts = append(opts, dlock.WithFencing())
	}
	return opts
}

// runArgs is a parsed dlock run command line.
type runArgs struct {
	lockFlags
	argv  []string // COMMAND and its arguments
	grace time.Duration
}

// runSynopsis ends run's usage errors.
const runSynopsis = "usage: dlock run [flags] NAME COMMAND [ARGS...]"

// parseRun reads the command line of dlock run without acting on it:
// flags, NAME, then COMMAND (after an optional "--") or -c STRING.
func (c *cli) parseRun(args []string) (runArgs, error) {
	fs := newFlagSet("run")
	var a runArgs
	a.define(fs)
	var shell optString
	fs.Var(&shell, "c", "")
	fs.Var(&shell, "command", "")
	fs.Var(newDurationFlag(&a.grace, 5*time.Second), "grace", "")
	if defineHook != nil {
		defineHook(fs)
	}
	if err := c.parseFlags(fs, runUsage, args); err != nil {
		return a, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return a, usageError("run: missing lock NAME; %s", runSynopsis)
	}
	a.name, rest = rest[0], rest[1:]
	switch {
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && (rest[0] == "-c" || rest[0] == "--command" || rest[0] == "-command"):
		// flock's order: NAME -c STRING.
		if shell.set {
			return a, usageError("run: -c given twice")
		}
		if len(rest) != 2 {
			return a, usageError("run: -c takes one argument, the shell command; got %d", len(rest)-1)
		}
		shell = optString{rest[1], true}
		rest = nil
	case len(rest) > 0 && strings.HasPrefix(rest[0], "-") && len(rest[0]) > 1:
		return a, usageError("run: %s after NAME %q: flags go before NAME; %s", rest[0], a.name, runSynopsis)
	}
	switch {
	case shell.set && len(rest) > 0:
		return a, usageError("run: both -c and COMMAND given (%q); give one", rest[0])
	case shell.set:
		a.argv = []string{"sh", "-c", shell.s}
	case len(rest) == 0:
		return a, usageError("run: missing COMMAND after NAME %q; %s", a.name, runSynopsis)
	default:
		a.argv = rest
	}
	if !a.label.set {
		a.label.s = commandLabel(a.argv)
	}
	return a, a.check(c, "run")
}

func (c *cli) runCmd(ctx context.Context, args []string) error {
	a, err := c.parseRun(args)
	if err != nil {
		return err
	}
	name, argv := a.name, a.argv
	// --wait counts from here: it bounds the connection check too.
	start := time.Now()
	s, lk, err := a.open(ctx, c, "run")
	if err != nil {
		return err
	}
	defer s.close()

	// Signals are caught from here on: while waiting they abort the wait,
	// later they are forwarded to COMMAND.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	lockCtx, err := acquire(ctx, lk, a.wait, start, sigs)
	if err != nil {
		return lockError(&a.lockFlags, err)
	}
	vars := lockVars(s, lk, name, lockCtx)
	env := append(withoutVars(os.Environ(), childEnv), vars...)
	if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: acquired %q after %v (%s)\n", name, time.Since(start).Round(time.Millisecond), strings.Join(vars[1:], ", "))
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
			return c.lockLost(lockCtx, a.what(), argv[0], ch, a.grace, sigs)
		}
		break
	}
	code := ch.exitCode()
	if err := release(lk, lockCtx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) || errors.Is(context.Cause(lockCtx), dlock.ErrLockLost) {
			return exitf(exitLockLost, "%s was lost before %s exited (it exited with status %d); it may have run without it", a.what(), argv[0], code)
		}
		fmt.Fprintf(c.stderr, "dlock: releasing %q: %v; it frees itself when its lease runs out\n", name, trimPrefix(err))
	} else if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: released %q; %s exited with status %d\n", name, argv[0], code)
	}
	return &exitError{code: code}
}

// acquire takes the lock: once with --wait 0, until --wait after start
// with a positive one, else as long as it takes. A signal aborts the wait.
func acquire(ctx context.Context, lk locker, wait optDuration, start time.Time, sigs <-chan os.Signal) (context.Context, error) {
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
		waitCtx, stop = context.WithDeadline(sigCtx, start.Add(wait.d))
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

// open connects to Redis and returns the session and the lock the flags
// name: with --permits, a permit semaphore, set up if new (notes go to
// stderr).
func (a *lockFlags) open(ctx context.Context, c *cli, cmd string) (*session, locker, error) {
	s, err := openSession(c.log(), a.eps, dlock.WithWatchdogTimeout(a.watchdog), dlock.WithClientName(a.label.s))
	if err != nil {
		return nil, nil, err
	}
	if a.permits.set {
		if err := a.ping(ctx, s); err != nil {
			s.close()
			return nil, nil, err
		}
		lk, err := a.openPermits(ctx, s, c.stderr)
		if err != nil {
			s.close()
			return nil, nil, optionError(cmd, err)
		}
		return s, lk, nil
	}
	lk, err := a.newLocker(s)
	if err != nil {
		s.close()
		return nil, nil, optionError(cmd, err)
	}
	if err := a.ping(ctx, s); err != nil {
		s.close()
		return nil, nil, err
	}
	return s, lk, nil
}

// ping checks the connection within the time the flags allow: -n (or
// --wait 0) allows minPingTimeout, --wait D allows D (at least
// minPingTimeout, at most pingTimeout), so that a Redis that accepts
// connections and never answers does not hold dlock longer than asked;
// without either, pingTimeout. The servers of a RedLock share it.
func (a *lockFlags) ping(ctx context.Context, s *session) error {
	timeout := a.pingTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return s.pingWithin(ctx, timeout)
}

// pingTimeout is the time the flags allow the connection check.
func (a *lockFlags) pingTimeout() time.Duration {
	if !a.wait.set {
		return pingTimeout
	}
	return min(max(a.wait.d, minPingTimeout), pingTimeout)
}

// maxLabel is the longest label dlock sets from a command line, in bytes
// (the library accepts 256).
const maxLabel = 200

// commandLabel is the label of a dlock run holder: its command line,
// quoted for sh, cut to maxLabel bytes.
func commandLabel(argv []string) string {
	q := make([]string, len(argv))
	for i, arg := range argv {
		q[i] = shellQuote(arg)
	}
	s := strings.Join(q, " ")
	if len(s) <= maxLabel {
		return s
	}
	s = s[:maxLabel-len("...")]
	for !utf8.ValidString(s) { // a cut rune
		s = s[:len(s)-1]
	}
	return s + "..."
}

// lockVars are the variables that describe a hold: DLOCK_NAME,
// DLOCK_OWNER and, for a fenced lock, DLOCK_TOKEN, as NAME=value; for a
// permit DLOCK_NAME and DLOCK_PERMIT, its id.
func lockVars(s *session, lk locker, name string, lockCtx context.Context) []string {
	if p, ok := lk.(permitLocker); ok {
		id, _ := p.sem.PermitID(lockCtx)
		return []string{"DLOCK_NAME=" + name, "DLOCK_PERMIT=" + id}
	}
	owner, _ := s.clients[0].Owner(lockCtx)
	vars := []string{"DLOCK_NAME=" + name, "DLOCK_OWNER=" + owner}
	if token, ok := dlock.Token(lockCtx); ok {
		vars = append(vars, "DLOCK_TOKEN="+strconv.FormatInt(token, 10))
	}
	return vars
}

// lockError turns a failed acquisition into an exit; a lock held by
// another owner exits with conflictCode.
func lockError(a *lockFlags, err error) error {
	name, wait, conflictCode := a.name, a.wait, a.conflictCode
	once := "--wait 0"
	if a.nonblock {
		once = "-n"
	}
	var se signalError
	switch {
	case errors.As(err, &se):
		return exitf(exitSignalBase+int(se.sig), "gave up waiting for %s: %v", a.what(), se)
	case a.permits.set && errors.Is(err, dlock.ErrNotObtained) && wait.set && wait.d == 0:
		return exitf(conflictCode, "semaphore %q has no permit available (%s)", name, once)
	case a.permits.set && errors.Is(err, dlock.ErrNotObtained) && wait.set:
		return exitf(conflictCode, "no permit of semaphore %q within --wait %v", name, wait.d)
	case errors.Is(err, dlock.ErrNotObtained) && wait.set && wait.d == 0:
		return exitf(conflictCode, "lock %q is held by another owner (%s)%s", name, once, quorumNote(err))
	case errors.Is(err, dlock.ErrNotObtained) && wait.set:
		return exitf(conflictCode, "lock %q not obtained within --wait %v%s", name, wait.d, quorumNote(err))
	case errors.Is(err, dlock.ErrNotObtained):
		return exitf(conflictCode, "%s", trimPrefix(err))
	}
	return redisError("taking "+a.what(), err)
}

// quorumNote is, for a RedLock, what each server that refused said.
func quorumNote(err error) string {
	var qe *dlock.QuorumError
	if errors.As(err, &qe) {
		return " (" + qe.Error() + ")"
	}
	return ""
}

// lockLost stops COMMAND after the lock (what: `lock "NAME"`) was lost
// under it.
func (c *cli) lockLost(lockCtx context.Context, what, cmd string, ch *child, grace time.Duration, sigs <-chan os.Signal) error {
	c.log().reportedLoss()
	fmt.Fprintf(c.stderr, "dlock: %s; stopping %s: SIGTERM now, SIGKILL in %v\n", trimPrefix(context.Cause(lockCtx)), cmd, grace)
	if ch.stop(grace, sigs) {
		fmt.Fprintf(c.stderr, "dlock: %s did not exit within %v of SIGTERM; killed it\n", cmd, grace)
	}
	return exitf(exitLockLost, "%s was lost while %s ran; %s was stopped (it exited with status %d)", what, cmd, cmd, ch.exitCode())
}

// release gives the lock back. Unlock reaches Redis even when lockCtx is
// cancelled; go-redis's timeouts bound it.
func release(lk locker, lockCtx context.Context) error {
	return lk.Unlock(lockCtx)
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

// trimPrefix returns err's message without the "dlock: " that the CLI's
// own report adds again.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "dlock: ")
}
