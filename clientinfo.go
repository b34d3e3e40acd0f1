package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/driver"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The holder record: one small Redis hash per Client, so that tools such as
// dlock status can say which process holds a lock, at no cost per lock.
//
// A lock's owner field is "<clientID>:<n>"; the record of that Client is
// the hash "dlock:client:<clientID>", with the fields below and a TTL.
// Lock keys are untouched, so Redisson clients see no difference, and a
// Client that never locks writes nothing.
//
// The record is written at the Client's first lock attempt (lazily, rather
// than in New: a Client used only for semaphores, latches or nothing at
// all then costs nothing) and rewritten, by one script call that sets the
// fields and the TTL, every third of the watchdog timeout until Close,
// which deletes it. Its TTL is the watchdog timeout, so the record of a
// process that died goes away about when its watchdog-renewed locks do. It
// is refreshed also while the Client holds no lock: a Lock may wait for
// any length of time, and the record must be there when it gets the lock;
// that costs two commands per Client every ten seconds (by default), never
// one per lock.
//
// The record also tells a dead fair waiter: a FairMutex waiter takes a
// dlock owner ahead of it out of the queue (fair.go), instead of waiting
// out the fair wait timeout, when that owner's record is gone although it
// is known to have existed: each write also puts the client id in the
// seen set (layout.ClientSeenKey). A missing record alone proves nothing:
// a Client under an ACL without ~dlock:client:* never writes one, a first
// write can fail, a restart without persistence or a FLUSH loses them.
//
// The record is never required: when it cannot be written (an ACL without
// its key pattern, an outage) locks work as before, the failure is logged
// once, tools show the holder as unknown, and a fair waiter of the Client
// that dies holds the queue up until its deadline, as a Redisson one does.

// maxClientName is the longest label WithClientName accepts, in bytes.
const maxClientName = 256

// recordWrite sets a record's fields and its TTL in one call, so that a
// record never lives without a TTL and one that expired or was deleted
// comes back at the next refresh. KEYS[1] the record; ARGV[1] the TTL in
// milliseconds, then field, value pairs.
var recordWrite = redis.NewScript(`
redis.call('hset', KEYS[1], unpack(ARGV, 2))
redis.call('pexpire', KEYS[1], ARGV[1])
return 1`)

// seenWrite puts a client id in the seen set, scored now (ms, the server's
// clock), and drops the ids not written for longer than the keep. It runs
// after each successful recordWrite, as its own call: on a cluster the set
// is in another slot than the record. KEYS[1] the seen set; ARGV[1] the
// client id; ARGV[2] the keep in milliseconds.
var seenWrite = redis.NewScript(`
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zadd', KEYS[1], now, ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now - tonumber(ARGV[2]))
return 1`)

// clientRecord keeps one Client's holder record in Redis.
type clientRecord struct {
	rdb      driver.Commands
	key      string
	id       string // the Client's id, its member in the seen set
	ttl      time.Duration
	args     []any // the script's ARGV
	logger   func(err error)
	started  atomic.Bool // the refresh loop was started
	mu       sync.Mutex
	stop     context.CancelFunc // nil until started, and after close
	done     chan struct{}      // closed when the loop has returned
	closed   bool
	logged   atomic.Bool // a write failure was logged
	interval time.Duration
	wrote    chan struct{} // closed once the first write has succeeded or failed
}

// newClientRecord prepares the record of c; nothing is sent until touch.
func newClientRecord(c *Client, now time.Time) *clientRecord {
	host, _ := os.Hostname()
	prog := ""
	if len(os.Args) > 0 {
		prog = filepath.Base(os.Args[0])
	}
	ttl := c.cfg.watchdogTimeout
	args := []any{millis(ttl),
		layout.RecordHost, host,
		layout.RecordPID, strconv.Itoa(os.Getpid()),
		layout.RecordProgram, prog,
		layout.RecordStarted, now.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	if c.cfg.clientName != "" {
		args = append(args, layout.RecordName, c.cfg.clientName)
	}
	r := &clientRecord{rdb: c.drv, key: layout.ClientRecordPrefix + c.id, id: c.id, ttl: ttl, args: args, interval: ttl / 3,
		wrote: make(chan struct{})}
	r.logger = func(err error) {
		switch {
		case transport.ConnectionLost(err) || errors.Is(err, context.DeadlineExceeded):
			// Redis cannot be reached: the lock calls report that
			// themselves, and the record is written again at the next
			// refresh. Not worth more than a debug line, and not the
			// one Info line kept for a lasting refusal.
			c.cfg.logger.Debug("dlock: holder record not written: redis unreachable; retried at the next refresh",
				"key", r.key, "error", err)
		case !r.logged.CompareAndSwap(false, true):
		case isNoPerm(err):
			c.cfg.logger.Info("dlock: holder record not written, so dlock status shows this Client's locks as held by an unknown client, and a fair waiter of this Client that dies holds the queue up until its fair wait timeout (the ACL needs ~dlock:client:*); locks work",
				"key", r.key, "error", err)
		default:
			c.cfg.logger.Info("dlock: holder record not written, so dlock status shows this Client's locks as held by an unknown client, and a fair waiter of this Client that dies holds the queue up until its fair wait timeout; locks work",
				"key", r.key, "error", err)
		}
	}
	return r
}

// isNoPerm reports a Redis NOPERM reply: an ACL refused the command or
// its key.
func isNoPerm(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM")
}

// touch starts keeping the record, if it is not kept already: the first
// lock attempt calls it. It does not wait for Redis.
func (r *clientRecord) touch() {
	if r.started.Load() || !r.started.CompareAndSwap(false, true) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.done = stop, make(chan struct{})
	go r.loop(ctx)
}

// loop writes the record now and again every interval until ctx ends.
func (r *clientRecord) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	r.write(ctx)
	close(r.wrote)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.write(ctx)
		}
	}
}

// write sends the record's fields and TTL, then, once the record is
// there, marks the client id seen; it gives up at the next refresh. A
// record not written is not marked: the seen set names only Clients whose
// record existed.
func (r *clientRecord) write(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.interval)
	defer cancel()
	key := r.key
	err := recordWrite.Run(ctx, r.rdb, []string{key}, r.args...).Err()
	if err == nil {
		key = layout.ClientSeenKey
		err = seenWrite.Run(ctx, r.rdb, []string{key}, r.id, millis(layout.ClientSeenKeep)).Err()
	}
	if err != nil && ctx.Err() == nil {
		r.logger(fmt.Errorf("writing %s: %w", key, err))
	}
}

// await returns once the record's first write has succeeded (the record
// and the seen mark are there) or failed, or ctx has ended, or done (the
// Client's) is closed; at once when the record is not kept (touch was
// never called). A fair waiter awaits it before it joins the queue, so
// that it can be told dead should its process die while queued; after a
// failed write it is never told dead (it is not in the seen set), which
// is safe: it then holds the queue up until its deadline if it dies.
func (r *clientRecord) await(ctx context.Context, done <-chan struct{}) {
	if !r.started.Load() {
		return
	}
	select {
	case <-r.wrote:
	case <-ctx.Done():
	case <-done:
	}
}

// goneOwner reports whether owner is a dlock owner whose Client's holder
// record is gone although it is known to have existed (its id is in the
// seen set): the Client died, and its record expired, at most the
// watchdog timeout after its last refresh. It is false for a Redisson
// owner (no dlock client id, so no record by design), for a Client never
// seen (an ACL without ~dlock:client:*, a first write that failed, data
// lost to a restart or a FLUSH: such a waiter keeps Redisson's deadline
// rule), and when Redis cannot be asked: a waiter is taken for dead only
// on Redis's word. Both facts are read on the master, by scripts (a
// replica may lag); the record first, as a live owner's is there.
func (c *Client) goneOwner(ctx context.Context, owner string) bool {
	id, ok := layout.OwnerClientID(owner)
	if !ok || id == c.id {
		return false
	}
	exists, err := c.runInt(ctx, scripts.ClientExists, layout.ClientRecordPrefix+id)
	if err != nil || exists != 0 {
		return false
	}
	seen, err := c.runInt(ctx, scripts.ClientSeen, layout.ClientSeenKey, id)
	return err == nil && seen == 1
}

// runInt runs a one-key read script through the transport (on the
// master) and returns its integer reply.
func (c *Client) runInt(ctx context.Context, s *redis.Script, key string, args ...any) (int64, error) {
	cmd, _ := c.drv.Run(ctx, nil, s, []string{key}, args...)
	return cmd.Int64()
}

// close stops the refresh and deletes the record and its seen mark, if it
// was ever written, with a context of at most a second (go-redis honours it with
// ContextTimeoutEnabled; otherwise its read timeout bounds the wait). A
// record whose delete fails expires with its TTL.
func (r *clientRecord) close() {
	r.mu.Lock()
	r.closed = true
	stop, done := r.stop, r.done
	r.stop = nil
	r.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, r.ttl))
	defer cancel()
	_ = r.rdb.ZRem(ctx, layout.ClientSeenKey, r.id).Err()
	_ = r.rdb.Del(ctx, r.key).Err()
}
