package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

var holdUsage = `Usage: dlock hold [flags] NAME

Takes lock NAME and holds it until dlock gets SIGINT (Ctrl-C), SIGTERM or
SIGHUP, then releases it and exits 0, like "etcdctl lock NAME" without a
command. Without --lease the watchdog renews the lock meanwhile. Once the
lock is held, dlock prints the hold on stdout, one NAME=value line each,
quoted for sh:
  DLOCK_NAME    the lock name
  DLOCK_OWNER   the owner, "<clientUUID>:<n>": this holder's field in the lock hash
  DLOCK_TOKEN   the fencing token (with --fencing only)
With --permits N it holds a permit of the permit semaphore NAME instead
(see "dlock help run") and prints DLOCK_NAME and DLOCK_PERMIT, its id.
A script can start "dlock hold NAME > lock.env &", wait for lock.env to hold
DLOCK_OWNER, work, and end the hold with kill. If the lock is lost
(deleted, taken over, lease run out), dlock exits 6.

Flags:
` + lockFlagsHelp + `
` + seeHelp

// parseHold reads the command line of dlock hold without acting on it.
func (c *cli) parseHold(args []string) (lockFlags, error) {
	fs := newFlagSet("hold")
	var a lockFlags
	a.define(fs)
	pos, err := c.parse(fs, holdUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) != 1 {
		return a, usageError("hold: one lock NAME expected, got %d arguments; usage: dlock hold [flags] NAME", len(pos))
	}
	a.name = pos[0]
	if !a.label.set {
		a.label.s = "hold"
	}
	return a, a.check(c, "hold")
}

func (c *cli) holdCmd(ctx context.Context, args []string) error {
	a, err := c.parseHold(args)
	if err != nil {
		return err
	}
	// --wait counts from here: it bounds the connection check too.
	start := time.Now()
	s, lk, err := a.open(ctx, c, "hold")
	if err != nil {
		return err
	}
	defer s.close()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	lockCtx, err := acquire(ctx, lk, a.wait, start, sigs)
	if err != nil {
		return lockError(&a, err)
	}
	vars := lockVars(s, lk, a.name, lockCtx)
	for _, v := range vars {
		k, val, _ := strings.Cut(v, "=")
		fmt.Fprintf(c.stdout, "%s=%s\n", k, shellQuote(val))
	}
	if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: acquired %q after %v; holding it until SIGINT, SIGTERM or SIGHUP\n", a.name, time.Since(start).Round(time.Millisecond))
	}
	var why string
	select {
	case sig := <-sigs:
		why = signalName(sig.(syscall.Signal))
	case <-ctx.Done():
		why = "cancelled"
	case <-lockCtx.Done():
		c.log().reportedLoss()
		return exitf(exitLockLost, "%s; no longer holding it", trimPrefix(context.Cause(lockCtx)))
	}
	if err := release(lk, lockCtx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) || errors.Is(context.Cause(lockCtx), dlock.ErrLockLost) {
			return exitf(exitLockLost, "%s was lost before %s: %s", a.what(), why, trimPrefix(err))
		}
		return redisError(fmt.Sprintf("releasing %q (it frees itself when its lease runs out)", a.name), err)
	}
	if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: released %q after %v (%s)\n", a.name, time.Since(start).Round(time.Millisecond), why)
	}
	return nil
}

// shellQuote quotes s for sh when it has characters outside a safe set.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/@%+=", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
