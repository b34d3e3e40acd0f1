package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"
)

var unlockUsage = `Usage: dlock unlock --force [--yes] [flags] NAME

Deletes lock NAME whoever holds it, and wakes its waiters: for a lock whose
holder is stuck or gone (a crashed holder's lock also frees itself when its
lease runs out). The holders are not told until their next renewal or
unlock: a dlock run holding it stops its COMMAND then. A fair lock's
queue stays, so that its waiters take the lock in order; dlock
clear-queue deletes a queue held up by waiters that are gone. Asks for
confirmation on stdin unless --yes is given; the question names the
holders, with the program, host and pid their dlock Clients recorded.

Flags:
  --force       required: says you mean to take the lock from its holders
  --yes         do not ask
  --redis URL   the Redis deployment

` + seeHelp

// unlockArgs is a parsed dlock unlock command line.
type unlockArgs struct {
	eps  []endpoint
	name string
	yes  bool
}

// parseUnlock reads the command line of dlock unlock without acting on it.
func (c *cli) parseUnlock(args []string) (unlockArgs, error) {
	fs := newFlagSet("unlock")
	conn := addConnFlags(fs)
	var a unlockArgs
	force := fs.Bool("force", false, "")
	fs.BoolVar(&a.yes, "yes", false, "")
	pos, err := c.parse(fs, unlockUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) != 1 {
		return a, usageError("unlock: one lock NAME expected, got %d arguments; usage: dlock unlock --force [--yes] NAME", len(pos))
	}
	if !*force {
		return a, usageError("unlock: --force is required: it deletes the lock whoever holds it")
	}
	a.name = pos[0]
	a.eps, err = c.endpoints(conn)
	return a, err
}

func (c *cli) unlockCmd(ctx context.Context, args []string) error {
	a, err := c.parseUnlock(args)
	if err != nil {
		return err
	}
	name := a.name
	s, states, err := c.openAndInspect(ctx, "unlock", a.eps, name)
	if err != nil {
		return err
	}
	defer s.close()
	st := heldState(states)
	if st.Semaphore != nil {
		return exitf(exitFailure, "unlock: %q is a semaphore, not a lock; a permit comes back when it is released or its lease runs out", name)
	}
	if !st.Locked {
		fmt.Fprintf(c.stdout, "lock %q is not held; nothing to unlock\n", name)
		if n := len(st.Queue); n > 0 {
			fmt.Fprintf(c.stdout, "%s in its queue: dlock clear-queue %s deletes the queue\n", plural(int64(n), "waiter"), shellQuote(name))
		}
		return nil
	}
	if !a.yes && !c.confirm(question(st)) {
		return exitf(exitFailure, "unlock: not confirmed; lock %q left as it is", name)
	}
	deleted, err := forceUnlock(ctx, s, st)
	if err != nil {
		return err
	}
	if !deleted {
		fmt.Fprintf(c.stdout, "lock %q was released in the meantime; nothing to unlock\n", name)
		return nil
	}
	fmt.Fprintf(c.stdout, "unlocked %q (%s)\n", name, holdersText(st))
	return nil
}

// heldState is, of the states of one lock on each server of a session,
// the one that describes it: on several servers (RedLock) the first that
// has the lock.
func heldState(states []lockState) lockState {
	for _, st := range states {
		if st.Locked {
			return st
		}
	}
	return states[0]
}

// forceUnlock deletes lock st.Name whoever holds it, with the handle of
// the kind st was found with, and wakes its waiters: what dlock unlock
// --force and dlock ui's unlock do. It reports false when the lock was
// released in the meantime.
func forceUnlock(ctx context.Context, s *session, st lockState) (bool, error) {
	lk, err := s.newLocker(forceKind(st), st.Name)
	if err != nil {
		return false, optionError("unlock", err)
	}
	deleted, err := lk.ForceUnlock(ctx)
	if err != nil {
		return false, redisError(fmt.Sprintf("unlock %q", st.Name), err)
	}
	return deleted, nil
}

// confirm asks question on stderr and reports whether the answer read from
// stdin is yes.
func (c *cli) confirm(question string) bool {
	fmt.Fprint(c.stderr, question)
	line, _ := bufio.NewReader(c.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// question is the unlock prompt: who holds the lock, with what their
// dlock Clients recorded about themselves. Several holders are listed a
// line each before the question.
func question(st lockState) string {
	now := time.Now()
	if len(st.Holders) == 1 {
		h := st.Holders[0]
		return fmt.Sprintf("Delete lock %q, %s (%s)? [y/N] ", st.Name, holdersText(st), h.clientText(now, true))
	}
	var b strings.Builder
	for _, h := range st.Holders {
		role := ""
		if h.Role != "" {
			role = " (" + h.Role + ")"
		}
		fmt.Fprintf(&b, "  %s%s: %s\n", h.Owner, role, h.clientText(now, true))
	}
	fmt.Fprintf(&b, "Delete lock %q, %s? [y/N] ", st.Name, holdersText(st))
	return b.String()
}

// holdersText summarises who holds a lock: "held by 2 owners",
// "held by 1 owner, 3 waiting".
func holdersText(st lockState) string {
	var parts []string
	switch n := len(st.Holders); {
	case n == 1:
		parts = append(parts, "held by "+st.Holders[0].Owner)
	case n > 1:
		parts = append(parts, fmt.Sprintf("held by %d owners", n))
	default:
		parts = append(parts, "free")
	}
	if n := len(st.Queue); n > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting", n))
	}
	return strings.Join(parts, ", ")
}
