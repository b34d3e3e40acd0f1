package main

// dlock clear-queue exists for the queue nobody drains: a fair lock's
// waiters (the list redisson_lock_queue:{NAME} and the zset
// redisson_lock_timeout:{NAME}) live without a TTL, and a dead Redisson
// waiter holds the queue up until its deadline (5 minutes by default).
// unlock --force deletes the lock, not the queue, so that live waiters
// keep their order; this command deletes the queue and leaves the lock.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

var clearQueueUsage = `Usage: dlock clear-queue [--yes] [flags] NAME

Deletes the waiting queue of fair lock NAME (its redisson_lock_queue and
redisson_lock_timeout keys) and leaves the lock itself as it is: for a
queue held up by waiters that are gone. A dlock waiter whose process died
leaves the queue by itself within its watchdog timeout (30 s; 10 s for
dlock run and hold), once its Client has written its holder record; a
Redisson (Java) one, or a dlock one without a record, only at its
deadline, the fair wait timeout (5 min by default) after the lock was
freed. Each waiter removed is woken on its channel: live ones, dlock and
Redisson alike, attempt again at once and join the queue anew, so their
order is lost. Asks for confirmation on stdin unless --yes is given; the
question names the waiters, with the program, host and pid their dlock
Clients recorded. To delete the lock, see dlock unlock.

Flags:
  --yes         do not ask
  --redis URL   the Redis deployment

` + seeHelp

// clearQueueArgs is a parsed dlock clear-queue command line.
type clearQueueArgs struct {
	eps  []endpoint
	name string
	yes  bool
}

// parseClearQueue reads the command line of dlock clear-queue without
// acting on it.
func (c *cli) parseClearQueue(args []string) (clearQueueArgs, error) {
	fs := newFlagSet("clear-queue")
	conn := addConnFlags(fs)
	var a clearQueueArgs
	fs.BoolVar(&a.yes, "yes", false, "")
	pos, err := c.parse(fs, clearQueueUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) != 1 {
		return a, usageError("clear-queue: one lock NAME expected, got %d arguments; usage: dlock clear-queue [--yes] NAME", len(pos))
	}
	a.name = pos[0]
	a.eps, err = c.endpoints(conn)
	return a, err
}

func (c *cli) clearQueueCmd(ctx context.Context, args []string) error {
	a, err := c.parseClearQueue(args)
	if err != nil {
		return err
	}
	name := a.name
	s, states, err := c.openAndInspect(ctx, "clear-queue", a.eps, name)
	if err != nil {
		return err
	}
	defer s.close()
	waiting := queued(states)
	if waiting == 0 {
		if err := clearQueues(ctx, s, name, 0); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "lock %q has no waiters; nothing to clear\n", name)
		return nil
	}
	if !a.yes && !c.confirm(queueQuestion(name, states)) {
		return exitf(exitFailure, "clear-queue: not confirmed; the queue of %q left as it is", name)
	}
	if err := clearQueues(ctx, s, name, waiting); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "cleared the queue of %q (%s)\n", name, plural(int64(waiting), "waiter"))
	return nil
}

// queued counts the waiters in the queues of one lock's states: on
// several servers (RedLock) each one's.
func queued(states []lockState) int {
	n := 0
	for _, st := range states {
		n += len(st.Queue)
	}
	return n
}

// clearQueues deletes the queue of fair lock name on every server of s,
// which held waiting waiters: what dlock clear-queue and dlock ui's clear
// do. With none waiting, a queue list gone with its deadlines left behind
// is deleted too: it holds nobody.
func clearQueues(ctx context.Context, s *session, name string, waiting int) error {
	for _, rdb := range s.rdbs {
		var err error
		if waiting == 0 {
			err = rdb.Del(ctx, layout.Prefixed(layout.QueuePrefix, name), layout.Prefixed(layout.TimeoutPrefix, name)).Err()
		} else {
			// Both keys and the waiters' channels are in the lock's
			// slot: one script, on a cluster too.
			err = clearQueue(ctx, rdb, name)
		}
		if err != nil {
			return redisError(fmt.Sprintf("clear-queue %q", name), err)
		}
	}
	return nil
}

// clearQueue deletes the queue of fair lock name on one server and wakes
// each waiter it held on its own channel (fair_clear.lua), so that a live
// one does not sleep out its timer: it attempts again and joins anew. On
// a cluster the wake goes out both as PUBLISH (Redisson's waiters) and as
// SPUBLISH (dlock's, which use sharded pub/sub there by default).
func clearQueue(ctx context.Context, rdb redis.UniversalClient, name string) error {
	_, cluster := rdb.(*redis.ClusterClient)
	sharded := "0"
	if cluster {
		sharded = "1"
	}
	keys := []string{layout.Prefixed(layout.QueuePrefix, name), layout.Prefixed(layout.TimeoutPrefix, name)}
	return scripts.FairClear.Run(ctx, rdb, keys, layout.Prefixed(layout.LockChannelPrefix, name), "0", sharded).Err()
}

// queueQuestion is the clear-queue prompt: the waiters, a line each, with
// what their dlock Clients recorded about themselves.
func queueQuestion(name string, states []lockState) string {
	now := time.Now()
	var b strings.Builder
	n := 0
	for _, st := range states {
		for _, w := range st.Queue {
			n++
			fmt.Fprintf(&b, "  %s: %s\n", w.Owner, w.clientText(now))
		}
	}
	fmt.Fprintf(&b, "Delete the queue of %q, %s? [y/N] ", name, plural(int64(n), "waiter"))
	return b.String()
}
