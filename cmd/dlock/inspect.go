package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// lockState is what Redis holds for one lock name, read in Redisson's
// layout: what status prints and list summarises.
type lockState struct {
	Name   string `json:"name"`
	Locked bool   `json:"locked"`
	// Kind is "mutex", "fair" or "rwlock"; "" for a free lock with no
	// queue. A fair lock nobody waits for has a mutex's layout (Redisson
	// deletes an empty queue), so status, list and top all show it as a
	// mutex.
	Kind string `json:"kind,omitempty"`
	// Mode is a read-write lock's mode: "read" or "write".
	Mode string `json:"mode,omitempty"`
	// TTL is the lease left in milliseconds, -1 for a lock without expiry;
	// absent when the lock is free.
	TTL *int64 `json:"ttl_ms,omitempty"`
	// Token is the last fencing token issued for the name, if any.
	Token   *int64   `json:"fencing_token,omitempty"`
	Holders []holder `json:"holders"`
	// Queue is a fair lock's waiters, head first.
	Queue []waiter `json:"queue,omitempty"`
	// Subscribed is the number of connections subscribed to the lock's
	// unlock channel (addSubscribers): the processes with Lock calls
	// waiting for it as a mutex or a read-write lock, one connection per
	// dlock Client or Redisson client. Fair waiters are in Queue instead.
	Subscribed int64 `json:"subscribed,omitempty"`
	// Semaphore is set when NAME is a semaphore (Kind "semaphore" or
	// "permit-semaphore"): its permits. TTL is then the lease left of the
	// permit that expires first.
	Semaphore *semaphoreState `json:"semaphore,omitempty"`
}

// holder is one owner's holds on a lock.
type holder struct {
	Owner string `json:"owner"`
	// Role is "read" or "write" on a read-write lock.
	Role  string `json:"role,omitempty"`
	Holds int64  `json:"holds"`
	// TTL is, for a read holder, the longest lease left among its holds
	// (each read hold has its own), in milliseconds.
	TTL *int64 `json:"ttl_ms,omitempty"`
	// Client is what the holder's dlock Client wrote about itself (host,
	// pid, program, label, start); absent for a Redisson client or a dlock
	// Client whose record is gone or unreadable (addClients).
	Client *clientInfo `json:"client,omitempty"`
	// clientErr is why the record could not be read, if Redis refused.
	clientErr string
}

// waiter is one owner in a fair lock's queue.
type waiter struct {
	Owner string `json:"owner"`
	// Deadline is when the others may skip the waiter as dead, in ms since
	// the epoch (dlock writes Redis server time, Redisson client time).
	Deadline int64 `json:"deadline_ms"`
	// In is Deadline minus Redis's current time, in milliseconds.
	In int64 `json:"deadline_in_ms"`
	// Client is what the waiter's dlock Client wrote about itself, as for
	// a holder (addClients); absent for a Redisson waiter, which writes
	// no record, and for a dead dlock waiter.
	Client *clientInfo `json:"client,omitempty"`
	// Gone is set for a dlock waiter whose Client's record is gone: its
	// process died or closed, and the next attempt of another dlock
	// waiter takes it out of the queue.
	Gone bool `json:"gone,omitempty"`
	// clientErr is why the record could not be read, if Redis refused.
	clientErr string
}

// errNotALock reports a key that exists but is not a lock.
var errNotALock = errors.New("not a lock")

// inspectCmds are the reads of one lock, queued in a pipeline by
// queueInspect and decoded by decode.
type inspectCmds struct {
	typ      *redis.StatusCmd
	fields   *redis.MapStringStringCmd
	pttl     *redis.DurationCmd
	token    *redis.StringCmd
	queue    *redis.StringSliceCmd
	timeouts *redis.ZSliceCmd
	now      *redis.TimeCmd
}

// queueInspect queues the reads of lock name in p, with now, a TIME
// queued in p that the reads of several locks may share. Every key of a
// lock is in one cluster slot, so on a cluster they stay one pipeline too.
func queueInspect(ctx context.Context, p redis.Pipeliner, name string, now *redis.TimeCmd) *inspectCmds {
	queueKey, timeoutKey := layout.Prefixed(layout.QueuePrefix, name), layout.Prefixed(layout.TimeoutPrefix, name)
	return &inspectCmds{
		typ:      p.Type(ctx, name),
		fields:   p.HGetAll(ctx, name),
		pttl:     p.PTTL(ctx, name),
		token:    p.Get(ctx, layout.Prefixed(layout.TokenPrefix, name)),
		queue:    p.LRange(ctx, queueKey, 0, -1),
		timeouts: p.ZRangeWithScores(ctx, timeoutKey, 0, -1),
		now:      now,
	}
}

// err is the first error of the reads, a missing key (redis.Nil) aside.
func (c *inspectCmds) err() error {
	for _, cmd := range []redis.Cmder{c.typ, c.fields, c.pttl, c.token, c.queue, c.timeouts, c.now} {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// inspect reads lock name, in one pipeline (on a cluster too).
func inspect(ctx context.Context, rdb redis.UniversalClient, name string) (lockState, error) {
	var cmds *inspectCmds
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmds = queueInspect(ctx, p, name, p.Time(ctx))
		return nil
	})
	return cmds.decode(ctx, rdb, name)
}

// inspectBatch is the number of locks whose reads listLocks sends in one
// pipeline.
const inspectBatch = 256

// inspectMany reads the locks names as inspect does, inspectBatch of
// them per pipeline: a round trip per batch rather than per lock. Its
// results are in the order of names; a name whose decode fails with
// errNotALock gets a zero lockState (Name ""), any other error ends it.
func inspectMany(ctx context.Context, rdb redis.UniversalClient, names []string) ([]lockState, error) {
	out := make([]lockState, 0, len(names))
	for batch := range slices.Chunk(names, inspectBatch) {
		cmds := make([]*inspectCmds, len(batch))
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			now := p.Time(ctx)
			for i, name := range batch {
				cmds[i] = queueInspect(ctx, p, name, now)
			}
			return nil
		})
		for i, name := range batch {
			st, err := cmds[i].decode(ctx, rdb, name)
			if errors.Is(err, errNotALock) {
				st = lockState{}
			} else if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// decode reads the replies of queueInspect's reads of lock name; a
// semaphore (a string) and a read-write lock's read leases take a read
// more.
func (c *inspectCmds) decode(ctx context.Context, rdb redis.UniversalClient, name string) (lockState, error) {
	st := lockState{Name: name, Holders: []holder{}}
	typ, fields, pttl, token, queue, timeouts, now := c.typ, c.fields, c.pttl, c.token, c.queue, c.timeouts, c.now
	if typ.Val() == "string" {
		return inspectSemaphore(ctx, rdb, name)
	}
	if t := typ.Val(); t != "" && t != "none" && t != "hash" {
		return st, fmt.Errorf("%w: %q is a Redis %s", errNotALock, name, t)
	}
	if err := c.err(); err != nil {
		return st, err
	}
	if v, err := token.Int64(); err == nil {
		st.Token = &v
	}
	for _, owner := range queue.Val() {
		w := waiter{Owner: owner}
		for _, z := range timeouts.Val() {
			if z.Member == owner {
				w.Deadline = int64(z.Score)
				w.In = w.Deadline - now.Val().UnixMilli()
			}
		}
		st.Queue = append(st.Queue, w)
	}
	if typ.Val() != "hash" {
		if len(st.Queue) > 0 {
			st.Kind = "fair"
		}
		return st, nil
	}

	st.Locked = true
	ms := pttl.Val().Milliseconds()
	if pttl.Val() < 0 {
		ms = -1
	}
	st.TTL = &ms
	h := fields.Val()
	if !isLockHash(h) {
		return st, fmt.Errorf("%w: %q is a Redis hash whose fields are not lock owners (<uuid>:<n>) with hold counts", errNotALock, name)
	}
	switch {
	case h[layout.ModeField] != "":
		st.Kind, st.Mode = "rwlock", h[layout.ModeField]
	case len(st.Queue) > 0 || len(timeouts.Val()) > 0:
		st.Kind = "fair"
	default:
		st.Kind = "mutex"
	}
	for field, v := range h {
		if field == layout.ModeField {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		hd := holder{Owner: field, Holds: n}
		if st.Kind == "rwlock" {
			hd.Role = "read"
			if owner, ok := strings.CutSuffix(field, layout.WriteSuffix); ok {
				hd.Owner, hd.Role = owner, "write"
			}
		}
		st.Holders = append(st.Holders, hd)
	}
	// Writers first (a write lock's holder may also hold reads), then by
	// owner.
	slices.SortFunc(st.Holders, func(a, b holder) int {
		if c := strings.Compare(b.Role, a.Role); c != 0 {
			return c
		}
		return strings.Compare(a.Owner, b.Owner)
	})
	if st.Kind == "rwlock" {
		if err := readLeases(ctx, rdb, name, st.Holders); err != nil {
			return st, err
		}
	}
	return st, nil
}

// readLeases sets each read holder's TTL: the longest PTTL of its holds'
// timeout keys.
func readLeases(ctx context.Context, rdb redis.UniversalClient, name string, hs []holder) error {
	cmds := make([][]*redis.DurationCmd, len(hs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, hd := range hs {
			if hd.Role != "read" {
				continue
			}
			for k := 1; k <= int(min(hd.Holds, 1000)); k++ {
				cmds[i] = append(cmds[i], p.PTTL(ctx, layout.ReadHoldKey(name, hd.Owner, k)))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, cs := range cmds {
		if len(cs) == 0 {
			continue
		}
		best := int64(-2)
		for _, c := range cs {
			if d := c.Val(); d >= 0 {
				best = max(best, d.Milliseconds())
			} else if d == -1 {
				best = max(best, -1)
			}
		}
		if best >= -1 {
			hs[i].TTL = &best
		}
	}
	return nil
}

// isLockHash reports whether the fields of a hash look like a lock's:
// owner fields with counts, and a read-write lock's mode.
func isLockHash(h map[string]string) bool {
	owners := 0
	for f, v := range h {
		if f == layout.ModeField {
			if v != "read" && v != "write" {
				return false
			}
			continue
		}
		if !ownerField.MatchString(f) {
			return false
		}
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return false
		}
		owners++
	}
	return owners > 0
}

// durationText formats a TTL in milliseconds for people: "850ms",
// "29.9s", "4m59s", "no expiry".
func durationText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case ms < 0:
		return "no expiry"
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// ownerField matches an owner field: a UUID, a thread or owner number, and
// for a write hold ":write".
var ownerField = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}:[0-9]+(:write)?$`)
