package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// Permit semaphores (Redisson's RPermitExpirableSemaphore layout, the
// library's PermitSemaphore): the string NAME holds the permits available,
// and the sorted set "{NAME}:timeout" maps each permit held, an id of 16
// random bytes, to its expiry in epoch milliseconds: on the Redis
// server's clock when dlock took or renewed it, on the Java client's when
// Redisson did. A permit records no owner: who holds it cannot be read
// from Redis.
const (
	permitTimeoutSuffix = "timeout"
	// noExpiryScore is the score of a Redisson permit without lease.
	noExpiryScore = 922337203685477
	// unknownPermitHolder is what status and list say about a permit's
	// holder: Redisson's layout has no field for it.
	unknownPermitHolder = "unknown (permits record no owner)"
)

// permitLocker takes one permit of a PermitSemaphore as the CLI takes a
// lock: Lock and TryLock take it, Unlock releases it.
type permitLocker struct {
	sem *dlock.PermitSemaphore
}

func (p permitLocker) Lock(ctx context.Context) (context.Context, error) { return p.sem.Acquire(ctx) }

func (p permitLocker) TryLock(ctx context.Context) (context.Context, error) {
	return p.sem.TryAcquire(ctx)
}

func (p permitLocker) Unlock(permitCtx context.Context) error { return p.sem.Release(permitCtx) }

// ForceUnlock is not how a permit is taken back; unlock --force deletes
// lock keys only.
func (p permitLocker) ForceUnlock(context.Context) (bool, error) {
	return false, fmt.Errorf("%w: semaphore %q: a permit is released by its id", dlock.ErrInvalidOption, p.sem.Name())
}

// openPermits returns the permit semaphore the flags name, set to
// --permits permits if it was never set. When it exists with another
// total (permits available plus held) it is left alone, and a note on
// stderr says so.
func (a *lockFlags) openPermits(ctx context.Context, s *session, stderr io.Writer) (locker, error) {
	if len(s.clients) > 1 {
		return nil, usageError("--permits: a permit semaphore lives on one Redis deployment; several --redis make a RedLock")
	}
	var opts []dlock.PermitOption
	switch lease, err := a.permitLeaseOf(); {
	case err != nil:
		return nil, err
	case lease != 0:
		opts = append(opts, dlock.WithPermitLease(lease))
	}
	sem, err := s.clients[0].NewPermitSemaphore(a.name, opts...)
	if err != nil {
		return nil, err
	}
	set, err := sem.TrySetPermits(ctx, a.permits.n)
	if err != nil {
		return nil, redisError(fmt.Sprintf("setting up semaphore %q", a.name), err)
	}
	if !set {
		avail, err1 := sem.AvailablePermits(ctx)
		held, err2 := sem.AcquiredPermits(ctx)
		if err := errors.Join(err1, err2); err != nil {
			return nil, redisError(fmt.Sprintf("reading semaphore %q", a.name), err)
		}
		if total := avail + held; total != a.permits.n {
			fmt.Fprintf(stderr, "dlock: semaphore %q already has %d permits (%d available, %d in use), not --permits %d; using it as it is\n", a.name, total, avail, held, a.permits.n)
		}
	}
	return permitLocker{sem}, nil
}

// permitLeaseOf is the lease of the permit the flags take: --permit-lease
// (dlock.NoPermitLease for "none"), else --lease, else 0 (the watchdog's).
func (a *lockFlags) permitLeaseOf() (time.Duration, error) {
	switch {
	case a.permitLease.set && a.permitLease.s == "none":
		return dlock.NoPermitLease, nil
	case a.permitLease.set:
		d, err := parseDuration(a.permitLease.s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("--permit-lease %q: want a positive duration (30s, 5m) or none", a.permitLease.s)
		}
		return d, nil
	case a.lease.set:
		return a.lease.d, nil
	}
	return 0, nil
}

// semaphoreState is what Redis holds for a semaphore: status and list show
// it in lockState.Semaphore.
type semaphoreState struct {
	// Available is the number of permits free, counting the expired
	// permits that the next script on the semaphore returns to the pool.
	Available int64 `json:"available"`
	// InUse is the number of permits held and not expired.
	InUse int `json:"in_use"`
	// Permits are the permits held, expired ones included, earliest
	// expiry first; none for a counting semaphore (RSemaphore), whose
	// permits are not recorded.
	Permits []permitState `json:"permits"`
}

// permitState is one permit of a permit semaphore.
type permitState struct {
	// ID is the permit id as Redisson and dlock show it: 32 hex digits.
	ID string `json:"id"`
	// TTL is the lease left in milliseconds on the Redis server's clock, -1
	// for a Redisson permit without lease; negative below -1 when it has
	// expired but was not returned to the pool yet.
	TTL int64 `json:"ttl_ms"`
	// Expired: the lease ran out; the next script on the semaphore returns
	// the permit to the pool.
	Expired bool `json:"expired,omitempty"`
	// Holder is always unknown: a permit records no owner.
	Holder string `json:"holder"`
}

// inspectSemaphore reads the semaphore name, whose key is a string; the
// error wraps errNotALock when the string is not a count.
func inspectSemaphore(ctx context.Context, rdb redis.UniversalClient, name string) (lockState, error) {
	st := lockState{Name: name, Holders: []holder{}}
	var (
		count *redis.StringCmd
		zs    *redis.ZSliceCmd
		clock *redis.TimeCmd
	)
	// The errors are read per command: TIME may fail alone (a user
	// without +time), and this machine's clock stands in for the server's.
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		count = p.Get(ctx, name)
		zs = p.ZRangeWithScores(ctx, layout.Suffixed(name, permitTimeoutSuffix), 0, -1)
		clock = p.Time(ctx)
		return nil
	})
	if err := zs.Err(); err != nil {
		return st, err
	}
	if err := count.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return st, err
	}
	n, perr := strconv.ParseInt(count.Val(), 10, 64)
	if perr != nil {
		return st, fmt.Errorf("%w: %q is a Redis string that is not a permit count", errNotALock, name)
	}
	sem := &semaphoreState{Available: n, Permits: []permitState{}}
	// Leases are read on the server's clock, which dlock's permit scripts
	// expire them on (this machine's if TIME failed).
	now := time.Now().UnixMilli()
	if t, err := clock.Result(); err == nil {
		now = t.UnixMilli()
	}
	for _, z := range zs.Val() {
		member, _ := z.Member.(string)
		p := permitState{ID: fmt.Sprintf("%x", member), Holder: unknownPermitHolder}
		switch score := int64(z.Score); {
		case score == noExpiryScore:
			p.TTL = -1
			sem.InUse++
		case score <= now:
			p.Expired, p.TTL = true, min(score-now, -2)
			sem.Available++
		default:
			p.TTL = score - now
			sem.InUse++
		}
		sem.Permits = append(sem.Permits, p)
	}
	st.Kind, st.Semaphore = "semaphore", sem
	if len(zs.Val()) > 0 {
		st.Kind = "permit-semaphore"
		// The lease of the first permit in use to expire, else of the
		// first expired one.
		first := sem.Permits[0]
		for _, p := range sem.Permits {
			if !p.Expired {
				first = p
				break
			}
		}
		st.TTL = &first.TTL
	}
	return st, nil
}

// printSemaphore prints a semaphore's state for people.
func printSemaphore(w io.Writer, st lockState) {
	sem := st.Semaphore
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "semaphore\t%s\n", st.Name)
	if st.Kind == "permit-semaphore" {
		fmt.Fprintf(tw, "kind\tpermit semaphore (permits with leases: dlock run --permits, Redisson RPermitExpirableSemaphore)\n")
	} else {
		fmt.Fprintf(tw, "kind\tsemaphore (a count: a permit semaphore with no permit held, or a Redisson RSemaphore)\n")
	}
	expired := len(sem.Permits) - sem.InUse
	state := fmt.Sprintf("%d available, %d in use", sem.Available, sem.InUse)
	if expired > 0 {
		state += fmt.Sprintf(" (%d expired, back in the pool at the next acquire or release)", expired)
	}
	fmt.Fprintf(tw, "permits\t%s\n", state)
	_ = tw.Flush()
	if len(sem.Permits) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "PERMIT\tLEASE LEFT\tHOLDER\n")
	for _, p := range sem.Permits {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.ID, permitLease(p), p.Holder)
	}
	_ = tw.Flush()
}

// permitLease says how long a permit has left.
func permitLease(p permitState) string {
	switch {
	case p.Expired:
		return "expired " + durationText(-p.TTL) + " ago"
	case p.TTL == -1:
		return "no expiry"
	}
	return durationText(p.TTL)
}

// listSemaphores finds the permit semaphores whose name matches pattern
// and that have permits held: the sorted sets "{NAME}:timeout" (or
// "NAME:timeout" for a NAME with a hash tag) next to a string NAME.
func listSemaphores(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]lockState, error) {
	keys, err := scanType(ctx, rdb, "*:"+permitTimeoutSuffix, "zset")
	if err != nil {
		return nil, err
	}
	var out []lockState
	for _, key := range keys {
		name := semaphoreName(key)
		if name == "" || !globMatch(pattern, name) {
			continue
		}
		st, err := inspectSemaphore(ctx, rdb, name)
		if errors.Is(err, errNotALock) {
			continue // a sorted set of something else
		}
		if err != nil {
			return nil, err
		}
		if st.Semaphore.InUse > 0 || len(st.Semaphore.Permits) > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// semaphoreName is the semaphore whose permit set key is, or "".
func semaphoreName(key string) string {
	base, ok := strings.CutSuffix(key, ":"+permitTimeoutSuffix)
	if !ok || base == "" {
		return ""
	}
	if inner, ok := strings.CutPrefix(base, "{"); ok {
		if inner, ok := strings.CutSuffix(inner, "}"); ok && !strings.ContainsAny(inner, "{}") {
			return inner
		}
	}
	if strings.Contains(base, "{") {
		return base // a name with a hash tag keeps it
	}
	return ""
}

// scanType returns the keys of a type matching pattern, sorted and without
// duplicates, from every master of a cluster.
func scanType(ctx context.Context, rdb redis.UniversalClient, pattern, typ string) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.ScanType(ctx, 0, pattern, scanCount, typ).Iterator()
		var found []string
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// globMatch reports whether s matches the Redis glob pattern (SCAN MATCH,
// KEYS): * any run, ? one byte, [abc] [^a-z] sets, \x a literal x.
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		case '[':
			if s == "" {
				return false
			}
			end := 1
			not := end < len(pattern) && pattern[end] == '^'
			if not {
				end++
			}
			match := false
			for ; end < len(pattern) && pattern[end] != ']'; end++ {
				switch {
				case pattern[end] == '\\' && end+1 < len(pattern):
					end++
					match = match || pattern[end] == s[0]
				case end+2 < len(pattern) && pattern[end+1] == '-' && pattern[end+2] != ']':
					lo, hi := pattern[end], pattern[end+2]
					if lo > hi {
						lo, hi = hi, lo
					}
					match = match || s[0] >= lo && s[0] <= hi
					end += 2
				default:
					match = match || pattern[end] == s[0]
				}
			}
			if match == not {
				return false
			}
			s = s[1:]
			pattern = pattern[min(end+1, len(pattern)):]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != pattern[0] {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		}
	}
	return s == ""
}

// optInt is an int flag that knows whether it was given.
type optInt struct {
	n   int
	set bool
}

func (f *optInt) String() string {
	if !f.set {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *optInt) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("not a whole number: %q", v)
	}
	f.n, f.set = n, true
	return nil
}

// what names what run and hold take, for their messages: `lock "NAME"` or
// `a permit of semaphore "NAME"`.
func (a *lockFlags) what() string {
	if a.permits.set {
		return fmt.Sprintf("a permit of semaphore %q", a.name)
	}
	return fmt.Sprintf("lock %q", a.name)
}
