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

	"github.com/dlock-go/dlock/internal/layout"
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
// that costs one command per Client every ten seconds (by default), never
// one per lock.
//
// The record also tells a dead fair waiter: a FairMutex waiter takes a
// dlock owner ahead of it whose record is gone out of the queue (fair.go),
// instead of waiting out the fair wait timeout.
//
// The record is never required: when it cannot be written (an ACL without
// its key pattern, an outage) locks work as before, the failure is logged
// once, and tools show the holder as unknown.

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

// clientRecord keeps one Client's holder record in Redis.
type clientRecord struct {
	rdb      redis.UniversalClient
	key      string
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
	wrote    chan struct{} // closed once the first write has had its answer
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
	r := &clientRecord{rdb: c.rdb, key: layout.ClientRecordPrefix + c.id, ttl: ttl, args: args, interval: ttl / 3,
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
			c.cfg.logger.Info("dlock: holder record not written, so dlock status shows this Client's locks as held by an unknown client (the ACL needs ~dlock:client:*); locks are not affected",
				"key", r.key, "error", err)
		default:
			c.cfg.logger.Info("dlock: holder record not written, so dlock status shows this Client's locks as held by an unknown client; locks are not affected",
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

// write sends the record's fields and TTL, giving up at the next refresh.
func (r *clientRecord) write(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.interval)
	defer cancel()
	if err := recordWrite.Run(ctx, r.rdb, []string{r.key}, r.args...).Err(); err != nil && ctx.Err() == nil {
		r.logger(fmt.Errorf("writing %s: %w", r.key, err))
	}
}

// await returns once the record's first write has had its answer, or ctx
// has ended, or done (the Client's) is closed; at once when the record is
// not kept (touch was never called).
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
// record is gone: the Client died (its record expired, at most the
// watchdog timeout after its last refresh) or closed. It is false for a
// Redisson owner (no dlock client id, so no record by design), and when
// the record cannot be read (an ACL without ~dlock:client:*, an outage):
// a waiter is taken for dead only on Redis's word.
func (c *Client) goneOwner(ctx context.Context, owner string) bool {
	id, ok := layout.OwnerClientID(owner)
	if !ok || id == c.id {
		return false
	}
	n, err := c.rdb.Exists(ctx, layout.ClientRecordPrefix+id).Result()
	return err == nil && n == 0
}

// close stops the refresh and deletes the record, if it was ever written,
// with a context of at most a second (go-redis honours it with
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
	_ = r.rdb.Del(ctx, r.key).Err()
}
