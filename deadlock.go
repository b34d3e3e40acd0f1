package dlock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// Deadlock detection across processes. Services that take several locks
// in different orders can wait for each other forever: owner A holds L1
// and waits for L2 while owner B holds L2 and waits for L1. Redis knows
// who holds each lock (the lock hashes); with WithDeadlockDetection a
// Client also records, next to its holder record, what each of its owners
// waits for, so that the wait-for graph of every such Client can be read
// and its cycles found: by Client.Deadlocks and dlock deadlocks, and by
// the waiting Locks themselves, the youngest of which backs off with
// ErrDeadlock.
//
// Only a wait that can be part of a cycle is recorded: a Lock whose
// context carries an owner (a lock context: the owner may hold locks),
// once it sleeps (the Observer's Wait at Round 1); its record goes when
// the Lock returns. An uncontended Lock, and a Lock with a fresh owner
// (which holds nothing, so nobody can wait for it), cost nothing.

// ErrDeadlock is returned by a Lock that WithDeadlockDetection found in a
// wait-for cycle, of which it was the youngest waiter: it gives up so
// that the others can go on. Its owner should release the locks it holds
// and try again. The error wraps ErrDeadlock and ErrNotObtained, and
// never context.Canceled or context.DeadlineExceeded: no context of the
// caller ended, and code that takes those for "the caller gave up" (and
// stops rather than retries) must not see them.
var ErrDeadlock = errors.New("dlock: deadlock")

// minDeadlockInterval bounds how often waiting Locks look for cycles.
const minDeadlockInterval = 10 * time.Millisecond

// WithDeadlockDetection makes the Client record what its owners wait for
// while they hold locks (see Client.Deadlocks and dlock deadlocks), and,
// with an interval above 0, makes such a waiting Lock look for a wait-for
// cycle every interval: when it finds one in which it is the youngest
// waiter (the latest to start waiting), its Lock fails with an error
// wrapping ErrDeadlock and ErrNotObtained. An interval of 0 only records.
//
// A cycle is acted on when two checks in a row find it, so that a wait
// that has just ended (its record not yet removed) is not taken for one.
// The cost: while such an owner waits, one write when its wait starts and
// one when it ends, the record's refresh every third of the watchdog
// timeout, and, with an interval, one read of the wait records (through
// their index: it costs what the recorded waits cost, not what the
// keyspace holds) and of the waited-for locks per interval per Client. A
// Client without waits sends nothing. In the Client, every Lock is
// observed as with WithObserver (a small allocation per call).
func WithDeadlockDetection(interval time.Duration) Option {
	return func(c *config) { c.deadlocks = &deadlockConfig{every: interval} }
}

// deadlockConfig is WithDeadlockDetection's setting.
type deadlockConfig struct{ every time.Duration }

func (d *deadlockConfig) validate() error {
	if d != nil && d.every != 0 && (d.every < minDeadlockInterval || d.every > MaxLease) {
		return fmt.Errorf("%w: deadlock check interval %v is outside [%v, %v] (0: record only)", ErrInvalidOption, d.every, minDeadlockInterval, MaxLease)
	}
	return nil
}

// Deadlock is one wait-for cycle: each wait's owner waits for a lock that
// the next wait's owner holds, the last one's held by the first.
type Deadlock struct {
	Waits []Wait
}

// Wait is an owner waiting for a lock while it holds others.
type Wait struct {
	Owner  string    // the waiting owner, "<clientID>:<n>"
	Lock   string    // the lock it waits for
	Kind   string    // that lock's kind (a Kind constant)
	Since  time.Time // when its wait started (its Client's clock)
	Holder Holder    // the owner's Client, from its holder record (empty if none)
}

// waitKey is the context key of a detected Lock's wait, per Client.
type waitKey struct{ c *Client }

// ownerWait is one Lock call of an owner under detection.
type ownerWait struct {
	owner, lock, kind string
	since             time.Time     // set when the wait starts
	cancel            func(error)   // fails the Lock (with ErrDeadlock)
	suspect           bool          // the last check found it the youngest of a cycle
	returned          bool          // the Lock returned; guarded by waits.mu
	field             string        // its field in the Client's wait record
	started           chan struct{} // closed when it is recorded (for tests)
}

// waits is a Client's record of its owners' waits, kept in Redis by one
// goroutine, which also looks for cycles; it runs only while there are
// waits (or their record is still to be deleted).
type waits struct {
	c       *Client
	every   time.Duration
	key     string
	changed chan struct{}

	mu      sync.Mutex
	current map[*ownerWait]bool
	stop    context.CancelFunc // the running loop's; nil while none runs
	done    chan struct{}      // closed when the last loop started returned
	closed  bool
}

// writeRetryMin is the first pause before a failed write of the wait
// record is tried again; the pause doubles up to the refresh period.
const writeRetryMin = 50 * time.Millisecond

func newWaits(c *Client, cfg *deadlockConfig) *waits {
	return &waits{c: c, every: cfg.every, key: layout.WaitsPrefix + c.id, changed: make(chan struct{}, 1),
		current: map[*ownerWait]bool{}}
}

// deadlockObserver is the Observer that tells the Client's waits when a
// detected Lock starts to sleep.
func (ws *waits) observer() Observer {
	return Observer{Wait: func(ctx context.Context, l LockInfo, wi WaitInfo) {
		if wi.Round != 1 {
			return
		}
		if w, ok := ctx.Value(waitKey{ws.c}).(*ownerWait); ok && w.lock == l.Name && w.kind == l.Kind {
			ws.begin(w)
		}
	}}
}

// lock is Lock under detection: h.lock with a context that the check
// can cancel, and the wait recorded while it sleeps.
func (ws *waits) lock(ctx context.Context, h *handle) (context.Context, error) {
	owner, ok := ownerFrom(ctx, h.c)
	if !ok {
		return h.lock(ctx) // a fresh owner holds nothing
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &ownerWait{owner: owner, lock: h.name, kind: h.kind.label(), cancel: cancel, started: make(chan struct{})}
	lockCtx, err := h.lock(context.WithValue(wctx, waitKey{h.c}, w))
	ws.end(w)
	if err != nil && errors.Is(context.Cause(wctx), ErrDeadlock) && ctx.Err() == nil {
		// Not err, which wraps the ended wctx: the caller's ctx did not end.
		return nil, fmt.Errorf("%w: %q: %s waits for it in a wait-for cycle, as its youngest waiter (%w)",
			ErrDeadlock, h.name, owner, ErrNotObtained)
	}
	return lockCtx, err
}

// begin records w, whose Lock has started to sleep.
func (ws *waits) begin(w *ownerWait) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.returned || ws.closed {
		return
	}
	w.since = time.Now()
	w.field = w.owner + " " + w.lock
	ws.current[w] = true
	close(w.started)
	ws.startLocked()
	ws.poke()
}

// end forgets w, whose Lock returned.
func (ws *waits) end(w *ownerWait) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.returned = true
	if ws.current[w] {
		delete(ws.current, w)
		ws.poke()
	}
}

// poke tells the loop that the waits changed.
func (ws *waits) poke() {
	select {
	case ws.changed <- struct{}{}:
	default:
	}
}

// startLocked starts the loop, unless it runs. ws.mu must be held.
func (ws *waits) startLocked() {
	if ws.stop != nil || ws.closed {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	ws.stop, ws.done = stop, make(chan struct{})
	go ws.loop(ctx, ws.done)
}

// loop keeps the record in Redis while the Client has waits: it writes it
// when the waits change, again soon after a write failed (not only at the
// next change or refresh), and every third of the watchdog timeout; with
// an interval it looks for cycles every interval. It returns once there
// are no waits and their record is deleted, so that an idle Client sends
// no commands.
func (ws *waits) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	every := ws.c.cfg.watchdogTimeout / 3
	refresh := time.NewTicker(every)
	defer refresh.Stop()
	var check <-chan time.Time
	if ws.every > 0 {
		t := time.NewTicker(ws.every)
		defer t.Stop()
		check = t.C
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	var retryC <-chan time.Time // retry.C while a failed write waits
	pause := writeRetryMin
	written := -1 // the waits in the record as last written; -1: unknown
	for {
		write := false
		select {
		case <-ctx.Done():
			return
		case <-ws.changed:
			write = true
		case <-refresh.C:
			write = true
		case <-retryC:
			write = true
		case <-check:
			if len(ws.snapshot()) > 0 {
				ws.check(ctx)
			}
		}
		if write {
			n, err := ws.write(ctx)
			switch {
			case err == nil:
				written, retryC, pause = n, nil, writeRetryMin
			case ctx.Err() == nil:
				ws.c.cfg.logger.Debug("dlock: wait record not written; retrying", "key", ws.key, "in", pause, "error", err)
				written = -1
				retry.Reset(pause)
				retryC, pause = retry.C, min(2*pause, every)
			}
		}
		if ws.idle(written) {
			return
		}
	}
}

// idle reports whether the loop can return: no waits, and none in Redis.
// It then marks the loop as stopped, so that the next wait starts one.
func (ws *waits) idle(written int) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if written != 0 || len(ws.current) > 0 || ws.stop == nil {
		return false
	}
	ws.stop()
	ws.stop = nil
	return true
}

// snapshot returns the waits recorded now.
func (ws *waits) snapshot() []*ownerWait {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*ownerWait, 0, len(ws.current))
	for w := range ws.current {
		out = append(out, w)
	}
	return out
}

// waitsWrite replaces a Client's wait record and its entry in the index:
// KEYS[1] the record, KEYS[2] the index; ARGV[1] the record's TTL in
// milliseconds, ARGV[2] the Client's id, ARGV[3] how many field, value
// pairs follow. The entry is scored by the record's expiry on the
// server's clock; entries whose record expired without being deleted (a
// Client killed) are pruned by every write, and the index expires with
// its last entry.
var waitsWrite = redis.NewScript(`
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
redis.call('del', KEYS[1])
local n = tonumber(ARGV[3])
if n > 0 then
  redis.call('hset', KEYS[1], unpack(ARGV, 4, 3 + 2 * n))
  redis.call('pexpire', KEYS[1], ARGV[1])
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[1]), ARGV[2])
else
  redis.call('zrem', KEYS[2], ARGV[2])
end
local last = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
if last[2] then
  redis.call('pexpireat', KEYS[2], last[2])
end
return 1`)

// waitsRead returns the values of every live wait record: KEYS[1] the
// index; ARGV[1] the records' prefix. It reads only the records the index
// names with an expiry still ahead, so its cost is that of the waits.
var waitsRead = redis.NewScript(`
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf')) do
  for _, v in ipairs(redis.call('hvals', ARGV[1] .. id)) do
    out[#out + 1] = v
  end
end
return out`)

// waitRecord is a wait's value in the record.
type waitRecord struct {
	Owner string `json:"owner"`
	Lock  string `json:"lock"`
	Kind  string `json:"kind"`
	Since int64  `json:"since"` // Unix milliseconds
}

// write replaces the Client's record with the waits recorded now (or
// deletes it when there are none), bounded by a third of the watchdog
// timeout. It returns how many waits it wrote.
func (ws *waits) write(ctx context.Context) (int, error) {
	cur := ws.snapshot()
	args := []any{millis(ws.c.cfg.watchdogTimeout), ws.c.id, len(cur)}
	for _, w := range cur {
		b, _ := json.Marshal(waitRecord{Owner: w.owner, Lock: w.lock, Kind: w.kind, Since: w.since.UnixMilli()})
		args = append(args, w.field, string(b))
	}
	ctx, cancel := context.WithTimeout(ctx, ws.c.cfg.watchdogTimeout/3)
	defer cancel()
	return len(cur), waitsWrite.Run(ctx, ws.c.drv, []string{ws.key, layout.WaitsIndex}, args...).Err()
}

// check looks for cycles and fails the Lock of each wait of this Client
// that is the youngest of a cycle found twice in a row.
func (ws *waits) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(ws.every, time.Second))
	defer cancel()
	cycles, err := ws.c.findDeadlocks(ctx, false)
	if err != nil {
		ws.c.cfg.logger.Debug("dlock: deadlock check failed; retried at the next interval", "error", err)
		return
	}
	victims := map[string]bool{}
	for _, d := range cycles {
		y := youngest(d)
		victims[y.Owner+" "+y.Lock] = true
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.current {
		found := victims[w.field]
		if found && w.suspect {
			ws.c.cfg.logger.Warn("dlock: deadlock: failing the youngest waiter of a wait-for cycle", "lock", w.lock, "owner", w.owner)
			w.cancel(ErrDeadlock)
		}
		w.suspect = found
	}
}

// youngest is the wait of d that started last (ties: the larger owner),
// the one that gives up.
func youngest(d Deadlock) Wait {
	return slices.MaxFunc(d.Waits, func(a, b Wait) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Owner, b.Owner))
	})
}

// close stops the loop and, if it ran, deletes the record and its entry.
func (ws *waits) close() {
	if ws == nil {
		return
	}
	ws.mu.Lock()
	ws.closed = true
	stop, done := ws.stop, ws.done
	ws.stop = nil
	clear(ws.current)
	ws.mu.Unlock()
	if done == nil {
		return
	}
	if stop != nil {
		stop()
	}
	<-done
	if stop == nil {
		return // the loop deleted the record before it returned
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, ws.c.cfg.watchdogTimeout))
	defer cancel()
	_, _ = ws.write(ctx)
}

// Deadlocks returns the wait-for cycles among the owners of every Client
// that records its waits (WithDeadlockDetection), on any host: each
// cycle once, its waits in order, starting with the youngest. The
// Client calling it needs no option. It reads the wait records through
// their index (one script call, whatever else the database holds), the
// locks waited for and the holder records of the owners in a cycle. A
// wait that has just ended may still be recorded: a cycle found once can
// be a passing one.
func (c *Client) Deadlocks(ctx context.Context) ([]Deadlock, error) {
	if c == nil || ctx == nil {
		return nil, fmt.Errorf("%w: nil client or context", ErrInvalidOption)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	d, err := c.findDeadlocks(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("dlock: deadlocks: %w", err)
	}
	return d, nil
}

// findDeadlocks reads the wait-for graph and returns its cycles, with the
// holder records of their owners when holders is set.
func (c *Client) findDeadlocks(ctx context.Context, holders bool) ([]Deadlock, error) {
	recorded, err := c.readWaits(ctx)
	if err != nil || len(recorded) == 0 {
		return nil, err
	}
	held, err := c.readHolders(ctx, recorded)
	if err != nil {
		return nil, err
	}
	// The graph: owner -> the owners holding what it waits for.
	edges := map[string][]Wait{} // waiter -> its waits
	for _, w := range recorded {
		edges[w.Owner] = append(edges[w.Owner], w)
	}
	next := func(owner string) []string {
		var out []string
		for _, w := range edges[owner] {
			for _, h := range held[w.Lock] {
				if h != owner && !slices.Contains(out, h) {
					out = append(out, h)
				}
			}
		}
		return out
	}
	cycles := cyclesOf(slices.Sorted(mapsKeys(edges)), next)
	out := make([]Deadlock, 0, len(cycles))
	for _, cyc := range cycles {
		var d Deadlock
		for i, owner := range cyc {
			nextOwner := cyc[(i+1)%len(cyc)]
			for _, w := range edges[owner] {
				if slices.Contains(held[w.Lock], nextOwner) {
					d.Waits = append(d.Waits, w)
					break
				}
			}
		}
		y := slices.Index(d.Waits, youngest(d))
		d.Waits = append(d.Waits[y:], d.Waits[:y]...)
		out = append(out, d)
	}
	if holders && len(out) > 0 {
		c.addHolders(ctx, out)
	}
	return out, nil
}

// mapsKeys returns the keys of m, as an iterator for slices.Sorted.
func mapsKeys[V any](m map[string]V) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// maxCycles bounds the cycles reported in one read.
const maxCycles = 100

// cyclesOf returns the simple cycles of the graph given by next among
// nodes, each once: it starts at its smallest node and goes only through
// larger ones.
func cyclesOf(nodes []string, next func(string) []string) [][]string {
	var out [][]string
	for _, start := range nodes {
		path := []string{start}
		on := map[string]bool{start: true}
		var walk func(n string)
		walk = func(n string) {
			for _, m := range next(n) {
				switch {
				case len(out) >= maxCycles:
					return
				case m == start:
					out = append(out, slices.Clone(path))
				case m > start && !on[m]:
					on[m] = true
					path = append(path, m)
					walk(m)
					path = path[:len(path)-1]
					on[m] = false
				}
			}
		}
		walk(start)
	}
	return out
}

// readWaits returns every recorded wait: the live records the index
// names (one slot, so one node of a cluster).
func (c *Client) readWaits(ctx context.Context) ([]Wait, error) {
	vals, err := waitsRead.Run(ctx, c.drv, []string{layout.WaitsIndex}, layout.WaitsPrefix).StringSlice()
	if err != nil {
		return nil, err
	}
	var out []Wait
	for _, v := range vals {
		var r waitRecord
		if json.Unmarshal([]byte(v), &r) == nil && r.Owner != "" {
			out = append(out, Wait{Owner: r.Owner, Lock: r.Lock, Kind: r.Kind, Since: time.UnixMilli(r.Since)})
		}
	}
	return out, nil
}

// readHolders returns, per lock waited for, its holders: the owner fields
// of its hash (a write hold's field names its owner with a suffix).
func (c *Client) readHolders(ctx context.Context, recorded []Wait) (map[string][]string, error) {
	held := map[string][]string{}
	for _, w := range recorded {
		if _, ok := held[w.Lock]; ok {
			continue
		}
		fields, err := c.drv.HKeys(ctx, w.Lock).Result()
		if err != nil && !isNil(err) {
			if strings.HasPrefix(err.Error(), "WRONGTYPE") {
				held[w.Lock] = nil
				continue
			}
			return nil, err
		}
		owners := []string{}
		for _, f := range fields {
			if f == layout.ModeField {
				continue
			}
			owners = append(owners, strings.TrimSuffix(f, layout.WriteSuffix))
		}
		held[w.Lock] = owners
	}
	return held, nil
}

// addHolders fills in the holder record of each wait's owner's Client,
// where it can be read.
func (c *Client) addHolders(ctx context.Context, ds []Deadlock) {
	found := map[string]Holder{}
	for i := range ds {
		for j := range ds[i].Waits {
			w := &ds[i].Waits[j]
			id := w.Owner
			if k := strings.LastIndexByte(id, ':'); k > 0 {
				id = id[:k]
			}
			h, ok := found[id]
			if !ok {
				m, err := c.drv.HGetAll(ctx, layout.ClientRecordPrefix+id).Result()
				if err == nil {
					h.Host, h.Program, h.Name = m[layout.RecordHost], m[layout.RecordProgram], m[layout.RecordName]
					h.PID, _ = strconv.Atoi(m[layout.RecordPID])
				}
				found[id] = h
			}
			w.Holder = h
		}
	}
}
