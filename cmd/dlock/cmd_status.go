package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

var statusUsage = `Usage: dlock status [flags] NAME

Shows lock NAME as Redis has it: its kind (mutex, fair, rwlock), who holds
it and how many times, the lease left, a read-write lock's mode and
readers, a fair lock's queue with each waiter's deadline, and the last
fencing token issued. Locks taken by Redisson (Java) show the same way.
CLIENT is what a dlock holder's or waiter's Client recorded about itself:
program (and label: dlock run's command), host, pid and when it started;
for Redisson, or a dlock holder whose record is gone, "unknown (another
client)". A dlock waiter whose record is gone shows as "gone": its process
died (its record expires with its watchdog timeout) or closed, and the
next attempt of another dlock waiter takes it out of the queue. A stuck
queue can be cleared with dlock clear-queue.

A semaphore (the string NAME, with a permit semaphore's "{NAME}:timeout"
set, as dlock run --permits and Redisson write them) shows as one: permits
available and in use, and each permit held with its id and lease left (an
expired one until the next acquire or release returns it to the pool).
A permit records no owner, so its holder shows as "unknown (permits record
no owner)"; a dlock run COMMAND can tell its own from DLOCK_PERMIT.

Flags:
  --json        print JSON instead of a table
  --redis URL   the Redis deployment

` + seeHelp

// statusArgs is a parsed dlock status command line.
type statusArgs struct {
	eps    []endpoint
	name   string
	asJSON bool
}

// parseStatus reads the command line of dlock status without acting on it.
func (c *cli) parseStatus(args []string) (statusArgs, error) {
	fs := newFlagSet("status")
	conn := addConnFlags(fs)
	var a statusArgs
	fs.BoolVar(&a.asJSON, "json", false, "")
	pos, err := c.parse(fs, statusUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) != 1 {
		return a, usageError("status: one lock NAME expected, got %d arguments; usage: dlock status [flags] NAME", len(pos))
	}
	a.name = pos[0]
	a.eps, err = c.endpoints(conn)
	return a, err
}

func (c *cli) statusCmd(ctx context.Context, args []string) error {
	a, err := c.parseStatus(args)
	if err != nil {
		return err
	}
	name := a.name
	s, states, err := c.openAndInspect(ctx, "status", a.eps, name)
	if err != nil {
		return err
	}
	defer s.close()
	if len(states) == 1 {
		if a.asJSON {
			return writeJSON(c.stdout, states[0])
		}
		printStatus(c.stdout, states[0])
		return nil
	}
	// Several servers (RedLock): each one's view of the lock.
	if a.asJSON {
		type nodeStatus struct {
			Redis  string    `json:"redis"`
			Status lockState `json:"status"`
		}
		out := make([]nodeStatus, len(states))
		for i, st := range states {
			out[i] = nodeStatus{s.eps[i].display, st}
		}
		return writeJSON(c.stdout, out)
	}
	for i, st := range states {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		fmt.Fprintf(c.stdout, "== server %d of %d: %s\n", i+1, len(states), s.eps[i].display)
		printStatus(c.stdout, st)
	}
	return nil
}

// openAndInspect connects to the servers, checks the name and reads the
// lock on each; the caller closes the session.
func (c *cli) openAndInspect(ctx context.Context, cmd string, eps []endpoint, name string) (*session, []lockState, error) {
	s, err := openSession(c.log(), eps)
	if err != nil {
		return nil, nil, err
	}
	if err := s.validName(cmd, name); err != nil {
		s.close()
		return nil, nil, err
	}
	if err := s.ping(ctx); err != nil {
		s.close()
		return nil, nil, err
	}
	states, err := inspectAll(ctx, s, name)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	return s, states, nil
}

// inspectAll reads lock name on every server of the session.
func inspectAll(ctx context.Context, s *session, name string) ([]lockState, error) {
	states := make([]lockState, len(s.rdbs))
	for i, rdb := range s.rdbs {
		st, err := inspect(ctx, rdb, name)
		if errors.Is(err, errNotALock) {
			return nil, exitf(exitFailure, "%v", err)
		}
		if err != nil {
			return nil, redisError(fmt.Sprintf("reading lock %q on %s", name, s.eps[i].display), err)
		}
		states[i] = st
		if err := addSubscribers(ctx, rdb, states[i:i+1]); err != nil {
			return nil, redisError(fmt.Sprintf("reading lock %q on %s", name, s.eps[i].display), err)
		}
	}
	// A RedLock's holder has its record on the first server.
	addClients(ctx, s.rdbs, states)
	return states, nil
}

// printStatus prints a lock's state for people.
func printStatus(w io.Writer, st lockState) {
	if st.Semaphore != nil {
		printSemaphore(w, st)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lock\t%s\n", st.Name)
	switch {
	case st.Locked:
		kind := st.Kind
		if st.Mode != "" {
			kind += ", " + st.Mode + " mode"
		}
		fmt.Fprintf(tw, "kind\t%s\n", kind)
		if *st.TTL < 0 {
			fmt.Fprintf(tw, "state\theld, no expiry\n")
		} else {
			fmt.Fprintf(tw, "state\theld, lease left %s\n", durationText(*st.TTL))
		}
	case len(st.Queue) > 0:
		fmt.Fprintf(tw, "kind\t%s\n", st.Kind)
		fmt.Fprintf(tw, "state\tfree, %d waiting\n", len(st.Queue))
	default:
		fmt.Fprintf(tw, "state\tfree\n")
	}
	if st.Subscribed > 0 {
		procs := "1 process"
		if st.Subscribed > 1 {
			procs = strconv.FormatInt(st.Subscribed, 10) + " processes"
		}
		fmt.Fprintf(tw, "waiting\t%s subscribed to its unlock channel (mutex or read-write waiters)\n", procs)
	}
	if st.Token != nil {
		fmt.Fprintf(tw, "fencing token\t%d (the last one issued)\n", *st.Token)
	}
	_ = tw.Flush()

	if len(st.Holders) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		now := time.Now()
		if st.Kind == "rwlock" {
			fmt.Fprintf(tw, "HOLDER\tROLE\tHOLDS\tLEASE LEFT\tCLIENT\n")
			for _, h := range st.Holders {
				lease := "-"
				if h.TTL != nil {
					lease = durationText(*h.TTL)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", h.Owner, h.Role, h.Holds, lease, h.clientText(now, true))
			}
		} else {
			fmt.Fprintf(tw, "HOLDER\tHOLDS\tCLIENT\n")
			for _, h := range st.Holders {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", h.Owner, h.Holds, h.clientText(now, true))
			}
		}
		_ = tw.Flush()
	}

	if len(st.Queue) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "#\tWAITING\tDEADLINE\tCLIENT\n")
		now := time.Now()
		for i, q := range st.Queue {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strconv.Itoa(i+1), q.Owner, deadlineText(q), q.clientText(now))
		}
		_ = tw.Flush()
	}
}

// deadlineText says when a waiter may be skipped as dead.
func deadlineText(q waiter) string {
	switch {
	case q.Deadline == 0:
		return "none"
	case q.In < 0:
		return "passed " + durationText(-q.In) + " ago"
	}
	return "in " + durationText(q.In)
}
