package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

var listUsage = `Usage: dlock list [flags] [PATTERN]

Lists the locks whose name matches PATTERN, a Redis glob (default *), with
their kind, holders and lease left. Locks are found with SCAN, never KEYS,
so listing does not block Redis; on a cluster every master is scanned. A
lock is a hash whose fields are owners ("<uuid>:<n>") with hold counts (and
a read-write lock's mode), so locks taken by Redisson (Java) are listed too.
HELD BY is the first holder's program, host and pid as its dlock Client
recorded them, or "unknown (another client)". A fair lock that is free
but has a queue is listed as "free, N waiting" (dlock status names the
waiters).
Permit semaphores with permits held (dlock run --permits) are listed too,
as "N of M permits" in use, the shortest lease left, and holders unknown:
a permit records no owner.

Flags:
  --json        print JSON instead of a table
  --redis URL   the Redis deployment

` + seeHelp

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// listArgs is a parsed dlock list command line.
type listArgs struct {
	eps     []endpoint
	pattern string
	asJSON  bool
}

// parseList reads the command line of dlock list without acting on it.
func (c *cli) parseList(args []string) (listArgs, error) {
	fs := newFlagSet("list")
	conn := addConnFlags(fs)
	a := listArgs{pattern: "*"}
	fs.BoolVar(&a.asJSON, "json", false, "")
	pos, err := c.parse(fs, listUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) > 1 {
		return a, usageError("list: at most one PATTERN expected, got %d arguments (quote a pattern with * so the shell leaves it alone)", len(pos))
	}
	if len(pos) == 1 {
		a.pattern = pos[0]
	}
	a.eps, err = c.endpoints(conn)
	return a, err
}

func (c *cli) listCmd(ctx context.Context, args []string) error {
	a, err := c.parseList(args)
	if err != nil {
		return err
	}
	pattern := a.pattern
	s, err := openReached(ctx, c.log(), a.eps)
	if err != nil {
		return err
	}
	defer s.close()
	all := make([][]lockState, len(s.rdbs))
	for i := range s.rdbs {
		if all[i], err = listServer(ctx, s, i, pattern); err != nil {
			return redisError("list on "+s.eps[i].display, err)
		}
	}
	if len(all) == 1 {
		if a.asJSON {
			return writeJSON(c.stdout, all[0])
		}
		printList(c.stdout, pattern, all[0])
		return nil
	}
	// Several servers (RedLock): each one's locks.
	if a.asJSON {
		type nodeLocks struct {
			Redis string      `json:"redis"`
			Locks []lockState `json:"locks"`
		}
		out := make([]nodeLocks, len(all))
		for i, locks := range all {
			out[i] = nodeLocks{s.eps[i].display, locks}
		}
		return writeJSON(c.stdout, out)
	}
	for i, locks := range all {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		fmt.Fprintf(c.stdout, "== server %d of %d: %s\n", i+1, len(all), s.eps[i].display)
		printList(c.stdout, pattern, locks)
	}
	return nil
}

// listServer is what dlock list shows of server i of s: the locks and
// permit semaphores whose name matches pattern, with their subscribers
// and holder records (dlock ui samples the same).
func listServer(ctx context.Context, s *session, i int, pattern string) ([]lockState, error) {
	rdb := s.rdbs[i]
	locks, err := listLocksAndSemaphores(ctx, rdb, pattern)
	if err != nil {
		return nil, err
	}
	if err := addSubscribers(ctx, rdb, locks); err != nil {
		return nil, err
	}
	// Records from this server first; a RedLock's are on the first.
	order := []redis.UniversalClient{rdb}
	for j, other := range s.rdbs {
		if j != i {
			order = append(order, other)
		}
	}
	addClients(ctx, order, locks)
	return locks, nil
}

// listLocks finds the locks whose name matches pattern, sorted by name:
// those held, and the free fair locks that have a queue.
func listLocks(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]lockState, error) {
	names, err := scanHashes(ctx, rdb, pattern)
	if err != nil {
		return nil, err
	}
	queued, err := scanQueues(ctx, rdb, pattern)
	if err != nil {
		return nil, err
	}
	names = append(names, queued...)
	slices.Sort(names)
	names = slices.Compact(names)
	states, err := inspectMany(ctx, rdb, names)
	if err != nil {
		return nil, err
	}
	locks := []lockState{}
	for _, st := range states {
		// Name "": another hash, or replaced by another type since the scan.
		if st.Name != "" && (st.Locked || len(st.Queue) > 0) {
			locks = append(locks, st)
		}
	}
	return locks, nil
}

// scanQueues returns the names matching pattern of the fair locks that
// have a queue (redisson_lock_queue:{name}, a list).
func scanQueues(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	keys, err := scanType(ctx, rdb, layout.QueuePrefix+":*", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, key := range keys {
		name := queueName(key)
		if name != "" && globMatch(pattern, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// queueName is the lock whose fair queue key is, or "".
func queueName(key string) string { return prefixedName(layout.QueuePrefix, key) }

// prefixedName is the name whose layout.Prefixed(prefix, name) key is,
// or "".
func prefixedName(prefix, key string) string {
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok || rest == "" {
		return ""
	}
	name := rest
	if inner, ok := strings.CutPrefix(rest, "{"); ok {
		if inner, ok := strings.CutSuffix(inner, "}"); ok && !strings.ContainsAny(inner, "{}") {
			name = inner
		}
	}
	if layout.Prefixed(prefix, name) != key {
		return ""
	}
	return name
}

// leaseText is the LEASE LEFT of list and TTL of top: "-" for a free lock.
func leaseText(st lockState) string {
	if st.TTL == nil {
		return "-"
	}
	return durationText(*st.TTL)
}

// listLocksAndSemaphores is listLocks plus the permit semaphores with
// permits held, sorted by name: what dlock list shows.
func listLocksAndSemaphores(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]lockState, error) {
	locks, err := listLocks(ctx, rdb, pattern)
	if err != nil {
		return nil, err
	}
	sems, err := listSemaphores(ctx, rdb, pattern)
	if err != nil {
		return nil, err
	}
	locks = append(locks, sems...)
	slices.SortFunc(locks, func(a, b lockState) int { return strings.Compare(a.Name, b.Name) })
	return locks, nil
}

// scanHashes returns the names of the hashes matching pattern, sorted and
// without duplicates, from every master of a cluster.
func scanHashes(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	return scanType(ctx, rdb, pattern, "hash")
}

// printList prints one line per lock.
func printList(w io.Writer, pattern string, locks []lockState) {
	if len(locks) == 0 {
		fmt.Fprintf(w, "no locks match %q\n", pattern)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\tKIND\tHOLDERS\tLEASE LEFT\tHELD BY\n")
	now := time.Now()
	for _, st := range locks {
		if sem := st.Semaphore; sem != nil {
			held := fmt.Sprintf("%d of %d permits", sem.InUse, sem.Available+int64(sem.InUse))
			lease := durationText(*st.TTL)
			if *st.TTL < -1 {
				lease = "expired"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st.Name, st.Kind, held, lease, unknownPermitHolder)
			continue
		}
		kind := st.Kind
		if st.Mode != "" {
			kind += " (" + st.Mode + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st.Name, kind, holderSummary(st), leaseText(st), heldBy(st, now))
	}
	_ = tw.Flush()
}

// heldBy describes a lock's first holder (writers come first) for
// list, and says how many other owners hold it.
func heldBy(st lockState, now time.Time) string {
	if len(st.Holders) == 0 {
		return "-"
	}
	s := st.Holders[0].clientText(now, false)
	others := map[string]bool{}
	for _, h := range st.Holders[1:] {
		if h.Owner != st.Holders[0].Owner {
			others[h.Owner] = true
		}
	}
	if n := len(others); n > 0 {
		s += fmt.Sprintf(", +%d more", n)
	}
	return s
}

// holderSummary counts holders (by role on a read-write lock) and waiters.
func holderSummary(st lockState) string {
	var parts []string
	if st.Kind == "rwlock" {
		roles := map[string]int{}
		for _, h := range st.Holders {
			roles[h.Role]++
		}
		for _, r := range []string{"write", "read"} {
			if roles[r] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", roles[r], r))
			}
		}
	} else if len(st.Holders) > 0 {
		parts = append(parts, fmt.Sprint(len(st.Holders)))
	} else {
		parts = append(parts, "free")
	}
	if n := st.waiting(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting", n))
	}
	return strings.Join(parts, ", ")
}
