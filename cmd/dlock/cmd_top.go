package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

var topUsage = `Usage: dlock top [flags] [PATTERN]

A live view of the locks whose name matches PATTERN, a Redis glob (default
*), like top or redis-cli --stat: each lock's kind, holder, hold count,
lease left and waiters, the most waited-for first, refreshed every second
until q or Ctrl-C (any other key refreshes at once). Locks are found with SCAN, as by dlock list, so the view
does not block Redis.

WAITERS is a fair lock's queue length plus the number of connections
subscribed to the lock's unlock channel: one per process with waiting
mutex or read-write Lock calls (a dlock Client shares one connection among
its waiters; Redisson likewise). dlock status and list count the same. HOLDER is the first holder's owner field,
"<client id>:<n>", its client id cut to 8 digits (--once --json has it
whole). HELD BY is what that holder's dlock Client recorded about itself
(program, host, pid, start) and how many other owners hold the lock, as
in dlock list. A free fair lock that has a queue is shown too, with
HOLDER and TTL "-".

Flags:
  --interval D  time between refreshes (default 1s)
  --once        print the view once and exit, for scripts
  --json        with --once: print JSON (the fields of dlock list --json,
                plus waiters)
  --redis URL   the Redis deployment

` + seeHelp

// topArgs is a parsed dlock top command line.
type topArgs struct {
	eps      []endpoint
	pattern  string
	interval time.Duration
	once     bool
	asJSON   bool
}

// parseTop reads the command line of dlock top without acting on it.
func (c *cli) parseTop(args []string) (topArgs, error) {
	fs := newFlagSet("top")
	conn := addConnFlags(fs)
	a := topArgs{pattern: "*"}
	fs.Var(newDurationFlag(&a.interval, time.Second), "interval", "")
	fs.BoolVar(&a.once, "once", false, "")
	fs.BoolVar(&a.asJSON, "json", false, "")
	pos, err := c.parse(fs, topUsage, args)
	if err != nil {
		return a, err
	}
	switch {
	case len(pos) > 1:
		return a, usageError("top: at most one PATTERN expected, got %d arguments (quote a pattern with * so the shell leaves it alone)", len(pos))
	case a.asJSON && !a.once:
		return a, usageError("top: --json needs --once")
	case a.interval < 100*time.Millisecond:
		return a, usageError("top: --interval %v is below 100ms", a.interval)
	}
	if len(pos) == 1 {
		a.pattern = pos[0]
	}
	a.eps, err = c.endpoints(conn)
	return a, err
}

// topLock is one row of dlock top: a lock as dlock list reads it, and its
// waiters.
type topLock struct {
	lockState
	// Waiters is the fair queue's length, or the number of connections
	// subscribed to the lock's channel.
	Waiters int64 `json:"waiters"`
	// Holds is the sum of the holders' hold counts.
	Holds int64 `json:"holds"`
}

// topServer is one Redis deployment's locks.
type topServer struct {
	Redis string    `json:"redis"`
	Locks []topLock `json:"locks"`
}

func (c *cli) topCmd(ctx context.Context, args []string) error {
	a, err := c.parseTop(args)
	if err != nil {
		return err
	}
	s, err := openReached(ctx, c.log(), a.eps)
	if err != nil {
		return err
	}
	defer s.close()
	if a.once {
		view, err := topView(ctx, s, a.pattern)
		if err != nil {
			return err
		}
		if a.asJSON {
			if len(view) == 1 {
				return writeJSON(c.stdout, view[0].Locks)
			}
			return writeJSON(c.stdout, view)
		}
		printTop(c.stdout, a.pattern, view, time.Now())
		return nil
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	tty := isTerminal(c.stdout)
	if tty {
		// The alternate screen, without a cursor, as top has; both are
		// given back at the end.
		fmt.Fprint(c.stdout, "\x1b[?1049h\x1b[?25l")
		defer fmt.Fprint(c.stdout, "\x1b[?25h\x1b[?1049l")
	}
	var keys <-chan byte
	if f, ok := c.stdin.(*os.File); ok && tty && isTerminal(f) {
		var restore func()
		keys, restore = topKeys(f)
		defer restore()
	}
	tick := time.NewTicker(a.interval)
	defer tick.Stop()
	for {
		view, err := topView(ctx, s, a.pattern)
		if ctx.Err() != nil {
			return nil // interrupted: a normal end
		}
		var b strings.Builder
		if tty {
			b.WriteString("\x1b[H\x1b[2J") // home, clear
		}
		if err != nil {
			// Redis may come back: say so and keep refreshing.
			fmt.Fprintf(&b, "dlock top: %v (retrying every %v)\n", err, a.interval)
		} else {
			printTop(&b, a.pattern, view, time.Now())
		}
		if !tty {
			b.WriteString("\n")
		}
		fmt.Fprint(c.stdout, b.String())
		select {
		case <-ctx.Done():
			return nil
		case k := <-keys:
			if k == 'q' || k == 'Q' {
				return nil
			}
			// Any other key refreshes now.
		case <-tick.C:
		}
	}
}

// topView reads the locks matching pattern on every server of s, most
// waited-for first.
func topView(ctx context.Context, s *session, pattern string) ([]topServer, error) {
	view := make([]topServer, len(s.rdbs))
	for i, rdb := range s.rdbs {
		locks, err := listLocks(ctx, rdb, pattern)
		if err != nil {
			return nil, redisError("top on "+s.eps[i].display, err)
		}
		// Holder records from this server first, as dlock list reads them.
		order := []redis.UniversalClient{rdb}
		for j, other := range s.rdbs {
			if j != i {
				order = append(order, other)
			}
		}
		addClients(ctx, order, locks)
		rows, err := withWaiters(ctx, rdb, locks)
		if err != nil {
			return nil, redisError("top on "+s.eps[i].display, err)
		}
		view[i] = topServer{Redis: s.eps[i].display, Locks: rows}
	}
	return view, nil
}

// withWaiters adds the waiters and hold counts to locks and sorts them:
// most waiters first, then most holds, then by name.
func withWaiters(ctx context.Context, rdb redis.UniversalClient, locks []lockState) ([]topLock, error) {
	rows := make([]topLock, len(locks))
	for i, st := range locks {
		rows[i] = topLock{lockState: st}
		for _, h := range st.Holders {
			rows[i].Holds += h.Holds
		}
	}
	if err := addSubscribers(ctx, rdb, locks); err != nil {
		return nil, err
	}
	for i, st := range locks {
		rows[i].lockState = st
		rows[i].Waiters = st.waiting()
	}
	slices.SortFunc(rows, func(a, b topLock) int {
		return cmp.Or(cmp.Compare(b.Waiters, a.Waiters), cmp.Compare(b.Holds, a.Holds), strings.Compare(a.Name, b.Name))
	})
	return rows, nil
}

// addSubscribers sets the Subscribed count of each lock in locks (not of
// semaphores), in one PUBSUB NUMSUB.
func addSubscribers(ctx context.Context, rdb redis.UniversalClient, locks []lockState) error {
	var channels []string
	for _, st := range locks {
		if st.Semaphore == nil {
			channels = append(channels, lockChannel(st))
		}
	}
	if len(channels) == 0 {
		return nil
	}
	subs, err := subscribers(ctx, rdb, channels)
	if err != nil {
		return err
	}
	for i := range locks {
		if locks[i].Semaphore == nil {
			locks[i].Subscribed = subs[lockChannel(locks[i])]
		}
	}
	return nil
}

// waiting is how many wait for the lock: the fair queue, plus the
// connections subscribed to its unlock channel (mutex and read-write
// waiters, one per process), since one lock name can have both.
func (st lockState) waiting() int64 { return int64(len(st.Queue)) + st.Subscribed }

// lockChannel is the channel a lock's mutex or read-write waiters
// subscribe to (Redisson's names, which dlock shares); a fair waiter has
// a channel of its own.
func lockChannel(st lockState) string {
	if st.Kind == "rwlock" {
		return layout.Prefixed(layout.RWChannelPrefix, st.Name)
	}
	return layout.Prefixed(layout.LockChannelPrefix, st.Name)
}

// subscribers counts the subscriptions to each channel: classic and, on
// a cluster, sharded ones (dlock's default there).
func subscribers(ctx context.Context, rdb redis.UniversalClient, channels []string) (map[string]int64, error) {
	n, err := rdb.PubSubNumSub(ctx, channels...).Result()
	if err != nil {
		return nil, err
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// Sharded subscriptions live on the channel's shard: ask each
		// channel's master.
		for _, ch := range channels {
			node, err := cc.MasterForKey(ctx, ch)
			if err != nil {
				return nil, err
			}
			sn, err := node.PubSubShardNumSub(ctx, ch).Result()
			if err != nil {
				return nil, err
			}
			n[ch] += sn[ch]
		}
	}
	return n, nil
}

// printTop prints the view: a summary line per server and a table of its
// locks.
func printTop(w io.Writer, pattern string, view []topServer, now time.Time) {
	for i, srv := range view {
		if i > 0 {
			fmt.Fprintln(w)
		}
		held, waiting := 0, int64(0)
		for _, l := range srv.Locks {
			if l.Locked {
				held++
			}
			waiting += l.Waiters
		}
		fmt.Fprintf(w, "dlock top - %s - %s - pattern %q: %s held, %s\n\n",
			now.Format("15:04:05"), srv.Redis, pattern, plural(int64(held), "lock"), plural(waiting, "waiter"))
		if len(srv.Locks) == 0 {
			fmt.Fprintf(w, "no locks match %q\n", pattern)
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "NAME\tKIND\tHOLDER\tHOLDS\tTTL\tWAITERS\tHELD BY\n")
		for _, l := range srv.Locks {
			kind := l.Kind
			if l.Mode != "" {
				kind += " (" + l.Mode + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", l.Name, kind, holderText(l.lockState), l.Holds, leaseText(l.lockState), l.Waiters, heldBy(l.lockState, now))
		}
		_ = tw.Flush()
	}
}

// holderText names the first holder (the writer of a read-write lock
// first), its client id cut to 8 digits; HELD BY counts the others.
func holderText(st lockState) string {
	if len(st.Holders) == 0 {
		return "-"
	}
	s := shortOwner(st.Holders[0].Owner)
	if r := st.Holders[0].Role; r != "" {
		s += " (" + r + ")"
	}
	return s
}

// shortOwner cuts an owner's client id to 8 digits: "0a1b2c3d…:7".
func shortOwner(owner string) string {
	if id := clientID(owner); len(id) == 36 && len(owner) > 36 {
		return id[:8] + "…" + owner[36:]
	}
	return owner
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// plural writes n things: "1 lock", "2 locks".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}
