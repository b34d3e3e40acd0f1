package main

// dlock deadlocks: the wait-for cycles among the owners of every dlock
// Client that records its waits (the library's WithDeadlockDetection), as
// Client.Deadlocks finds them.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

var deadlocksUsage = `Usage: dlock deadlocks [flags]

Finds deadlocks across processes: cycles of owners each waiting for a lock
that the next one holds. It reads the wait records that dlock Clients made
with WithDeadlockDetection keep (dlock:waits:*, through their index) and
the lock hashes, and prints each cycle: per owner, the lock it waits for,
since when, and the host, pid and label of its process. A Client without
the option records nothing, and its waits are not seen. A wait that ended
a moment ago may still be recorded: a cycle that is gone when you run the
command again was a passing one.

Exits 0 when it finds no cycle, 7 when it finds one (for scripts and
alerts: dlock deadlocks || page-someone), other codes on errors.

Flags:
  --json        one JSON object per cycle and line: {"waits": [{"owner",
                "lock", "kind", "since", "host", "pid", "program", "label"}]}
  --redis URL   the Redis deployment

` + seeHelp

type deadlocksArgs struct {
	eps  []endpoint
	json bool
}

func (c *cli) parseDeadlocks(args []string) (deadlocksArgs, error) {
	fs := newFlagSet("deadlocks")
	conn := addConnFlags(fs)
	var a deadlocksArgs
	fs.BoolVar(&a.json, "json", false, "")
	pos, err := c.parse(fs, deadlocksUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) != 0 {
		return a, usageError("deadlocks: no arguments expected, got %q; usage: dlock deadlocks [--json]", pos[0])
	}
	if a.eps, err = c.endpoints(conn); err == nil && len(a.eps) > 1 {
		err = usageError("deadlocks: one --redis deployment expected, got %d", len(a.eps))
	}
	return a, err
}

func (c *cli) deadlocksCmd(ctx context.Context, args []string) error {
	a, err := c.parseDeadlocks(args)
	if err != nil {
		return err
	}
	s, err := openReached(ctx, c.log(), a.eps)
	if err != nil {
		return err
	}
	defer s.close()
	found, err := s.clients[0].Deadlocks(ctx)
	if err != nil {
		return redisError("deadlocks", err)
	}
	if err := c.printDeadlocks(found, a.json); err != nil {
		return err
	}
	if len(found) > 0 {
		return exitf(exitDeadlock, "deadlocks: %d wait-for cycle(s) found", len(found))
	}
	return nil
}

// printDeadlocks prints the cycles found, as text or JSON lines.
func (c *cli) printDeadlocks(found []dlock.Deadlock, asJSON bool) error {
	if asJSON {
		return c.printDeadlocksJSON(found)
	}
	if len(found) == 0 {
		fmt.Fprintln(c.stdout, "no deadlocks among the recorded waits")
		return nil
	}
	now := time.Now()
	for i, d := range found {
		fmt.Fprintf(c.stdout, "deadlock %d: %d owners, each waiting for a lock the next one holds (youngest waiter first)\n", i+1, len(d.Waits))
		for _, w := range d.Waits {
			fmt.Fprintf(c.stdout, "  %s on %s waits for %q (%s) since %s, %v ago\n",
				w.Owner, processText(w.Holder), w.Lock, w.Kind, w.Since.UTC().Format(time.RFC3339), now.Sub(w.Since).Round(100*time.Millisecond))
		}
	}
	return nil
}

// processText names the process of an owner from its holder record.
func processText(h dlock.Holder) string {
	if h.Host == "" && h.PID == 0 {
		return unknownHolder
	}
	s := fmt.Sprintf("%s pid %d", h.Host, h.PID)
	if h.Name != "" {
		s += fmt.Sprintf(" (%s)", h.Name)
	} else if h.Program != "" {
		s += fmt.Sprintf(" (%s)", h.Program)
	}
	return s
}

type deadlockWaitJSON struct {
	Owner   string `json:"owner"`
	Lock    string `json:"lock"`
	Kind    string `json:"kind"`
	Since   string `json:"since"`
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Program string `json:"program,omitempty"`
	Label   string `json:"label,omitempty"`
}

// deadlockJSON is one cycle as --json prints it (and dlock ui serves it).
type deadlockJSON struct {
	Waits []deadlockWaitJSON `json:"waits"`
}

// deadlockJSONOf is cycle d as deadlockJSON.
func deadlockJSONOf(d dlock.Deadlock) deadlockJSON {
	out := deadlockJSON{Waits: []deadlockWaitJSON{}}
	for _, w := range d.Waits {
		out.Waits = append(out.Waits, deadlockWaitJSON{Owner: w.Owner, Lock: w.Lock, Kind: w.Kind,
			Since: w.Since.UTC().Format(time.RFC3339Nano), Host: w.Holder.Host, PID: w.Holder.PID,
			Program: w.Holder.Program, Label: w.Holder.Name})
	}
	return out
}

func (c *cli) printDeadlocksJSON(found []dlock.Deadlock) error {
	for _, d := range found {
		b, err := json.Marshal(deadlockJSONOf(d))
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, string(b))
	}
	return nil
}
