package dlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/scripts"
)

// Leader election on a lock, with observers: etcd's concurrency.Election
// on Redis. The leadership is a hold of a reentrant lock (a Mutex with the
// watchdog and fencing), so it has the lock's hand-over, renewal and loss,
// and a Redisson RLock on the same name excludes it. Next to the lock a
// small hash, the election record, holds the leader's value and revision;
// it lives exactly as long as the leadership (set when elected, kept with
// the lock's expiry, deleted when it ends). Every change is published on
// the election's channel, so that observers are pushed each change in
// order rather than polling.

var (
	// ErrNotLeader is returned by Proclaim and Resign when the context is
	// not a leader context of the election, or its leadership has ended.
	ErrNotLeader = errors.New("dlock: not the leader")
	// ErrNoLeader is returned by Leader when the election has no leader.
	ErrNoLeader = errors.New("dlock: no leader")
)

// Election is a leader election: Campaign waits to become the leader,
// Proclaim and Resign act as the leader, Leader and Observe tell anyone
// who leads. Candidates in any number of processes campaign on the same
// name; at most one leads at a time, as long as the lock's lease holds
// (see docs/safety.md: a leader paused past its lease is replaced, and
// learns so through its leader context; storage it writes should check
// the fencing token).
//
// Keys: the lock named after the election (Redisson's layout), its
// fencing counter, and the election record "dlock:election:{name}", which
// exists only while someone leads. Changes are published on the channel
// "dlock:election:channel:{name}". An Election is safe for concurrent use.
type Election struct {
	c        *Client
	name     string
	m        *Mutex
	keys     []string // the lock, the record, the channel
	readKeys []string // the lock, the record
	endKeys  []string // the record, the channel
	channel  string
}

// LeaderInfo describes a leadership: who leads and what it proclaimed.
// From Observe, a LeaderInfo with an empty Owner says that there is no
// leader (any more): Token is then that of the leadership that ended, or 0.
type LeaderInfo struct {
	// Value is the value given to Campaign, or to the latest Proclaim.
	Value string
	// Owner is the leader's lock owner ("<clientID>:<n>").
	Owner string
	// Holder is the holder record of the leader's Client.
	Holder Holder
	// Since is when the leader was elected (by its clock).
	Since time.Time
	// Token is the leadership's fencing token: each leadership of an
	// election has a larger one than the leaderships before it.
	Token int64
	// Seq counts the Proclaims of this leadership. (Token, Seq) is the
	// revision of a LeaderInfo: it grows with every change.
	Seq int64
}

// Holder says which process a leader runs in, as its Client's holder
// record does (dlock status shows the same).
type Holder struct {
	Host    string
	PID     int
	Program string
	Name    string // WithClientName's label, if any
}

// NewElection returns the election called name (a lock name). It talks
// to Redis only when used. Options: WithLease (a fixed lease instead of
// the watchdog; then Campaign's leadership ends when it runs out).
func (c *Client) NewElection(name string, opts ...LockOption) (*Election, error) {
	m, err := c.NewMutex(name, append(opts[:len(opts):len(opts)], WithFencing())...)
	if err != nil {
		return nil, err
	}
	record := layout.Prefixed(layout.ElectionPrefix, name)
	channel := layout.Prefixed(layout.ElectionChannelPrefix, name)
	return &Election{c: c, name: name, m: m, channel: channel,
		keys:     []string{name, record, channel},
		readKeys: []string{name, record},
		endKeys:  []string{record, channel},
	}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// leaderKey is the context key of a leadership of election e.
type leaderKey struct{ e *Election }

// leadership is one Campaign's term, carried by its leader context.
type leadership struct {
	e      *Election
	owner  string
	token  int64
	resign chan struct{} // closed by Resign, before the lock is released
	done   chan struct{} // closed when the keeper has returned (for tests)
}

// Campaign waits until the caller is elected, then records value as the
// leader's and returns the leader context, waiting as long as ctx allows
// (a ctx deadline is the longest wait). The leader context is the lock
// context of the election's lock: it is cancelled with cause ErrLockLost
// when the leadership is lost (the lock's lease ran out or the lock was
// taken from it), and it ends with Resign. Pass it to Proclaim and
// Resign, and to the work that must stop when leadership ends.
//
// When ctx ends first the error wraps ErrNotObtained and ctx.Err().
func (e *Election) Campaign(ctx context.Context, value string) (leaderCtx context.Context, err error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if err := e.reentry(ctx); err != nil {
		return nil, err
	}
	lockCtx, err := e.m.Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlock: campaign %q: %w", e.name, err)
	}
	owner, _ := ownerFrom(lockCtx, e.c)
	token, _ := Token(lockCtx)
	l := &leadership{e: e, owner: owner, token: token, resign: make(chan struct{}), done: make(chan struct{})}
	// Elected: the record is written on the leadership's time, not ctx's,
	// so that a ctx ending now neither fails an elected Campaign nor
	// leaves a record nobody ends.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.cfg.watchdogTimeout/3)
	err = e.elect(ectx, l, value)
	cancel()
	if err != nil {
		e.abandon(lockCtx, l)
		return nil, fmt.Errorf("dlock: campaign %q: %w", e.name, err)
	}
	leaderCtx = context.WithValue(lockCtx, leaderKey{e}, l)
	go l.keep(leaderCtx)
	return leaderCtx, nil
}

// elect writes the election record of l, whose owner holds the lock, with
// value and the Client's holder details, and announces it.
func (e *Election) elect(ctx context.Context, l *leadership, value string) error {
	host, _ := os.Hostname()
	prog := ""
	if len(os.Args) > 0 {
		prog = filepath.Base(os.Args[0])
	}
	res, err := e.c.drv.Call(ctx, nil, false, scripts.ElectionElect, e.keys, l.owner, l.token, e.c.publish, e.slack().Milliseconds(),
		"value", value, "since", time.Now().UnixMilli(), "host", host, "pid", os.Getpid(),
		"program", prog, "name", e.c.cfg.clientName).Int64()
	switch {
	case err != nil:
		return err
	case res == 0:
		return fmt.Errorf("%w: %q: the lock was lost before the leader was recorded", ErrLockLost, e.name)
	}
	return nil
}

// reentry refuses a Campaign whose ctx would re-enter the election's lock:
// its owner holds the lock through this Client already (ctx is a leader
// context of this election or of another Election on the same name, or
// carries a Mutex's hold of it). A re-entry would share that hold, and
// the end of either leadership would end both.
func (e *Election) reentry(ctx context.Context) error {
	if _, ok := ctx.Value(leaderKey{e}).(*leadership); ok {
		return fmt.Errorf("%w: %q: ctx is already a leader context of this election", ErrInvalidOption, e.name)
	}
	if owner, ok := ownerFrom(ctx, e.c); ok && e.c.holds.held(e.m.holdKey(owner)) != nil {
		return fmt.Errorf("%w: %q: ctx's owner holds the election's lock already (a leader context of another Election on this name, or a lock context of it); campaign with a context that holds no lock of this name", ErrInvalidOption, e.name)
	}
	return nil
}

// abandon undoes a Campaign whose record could not be written for sure:
// the record is ended (it may have been written, and observers told) and
// the lock released, both without waiting for Redis beyond a bound.
func (e *Election) abandon(lockCtx context.Context, l *leadership) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(lockCtx), e.c.cfg.watchdogTimeout/3)
	defer cancel()
	if err := l.end(ctx); err != nil {
		e.c.cfg.logger.Warn("dlock: election: a failed campaign's record was not ended; it expires with the lock",
			"election", e.name, "error", err)
	}
	_ = e.m.Unlock(ctx)
}

// Proclaim sets the leader's value without an election. leaderCtx is the
// context Campaign returned (or one derived from it). The error wraps
// ErrNotLeader when the leadership has ended (Resign, or lost); when
// Proclaim is the first to find it gone from Redis, the leader context is
// cancelled with cause ErrLockLost.
func (e *Election) Proclaim(leaderCtx context.Context, value string) error {
	l, err := e.leadership(leaderCtx)
	if err != nil {
		return err
	}
	seq, err := e.c.drv.Call(leaderCtx, nil, true, scripts.ElectionProclaim, e.keys, l.owner, l.token, e.c.publish, value).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("dlock: proclaim %q: %w", e.name, err)
	case seq == -2:
		l.abdicate(leaderCtx)
		return fmt.Errorf("%w: %q: the election record is gone from Redis; the lock is given back", ErrNotLeader, e.name)
	case seq < 0:
		l.lose(leaderCtx)
		return fmt.Errorf("%w: %q: the leadership is gone from Redis", ErrNotLeader, e.name)
	}
	return nil
}

// Resign ends the leadership of leaderCtx: the election record is
// deleted, observers are told that there is no leader, and the lock is
// released (to the next candidate). Nothing of the leadership is left in
// Redis. The leader context is cancelled with cause ErrUnlocked. The error
// wraps ErrNotLeader when the leadership had ended already.
func (e *Election) Resign(leaderCtx context.Context) error {
	l, err := e.leadership(leaderCtx)
	if err != nil {
		return err
	}
	select {
	case <-l.resign:
		return fmt.Errorf("%w: %q: resigned already", ErrNotLeader, e.name)
	default:
		close(l.resign)
	}
	endErr := l.end(leaderCtx)
	unlockErr := e.m.Unlock(leaderCtx)
	if err := errors.Join(endErr, unlockErr); err != nil {
		return fmt.Errorf("dlock: resign %q: %w", e.name, err)
	}
	return nil
}

// leadership returns the leadership that leaderCtx stands for, or an error
// wrapping ErrNotLeader.
func (e *Election) leadership(leaderCtx context.Context) (*leadership, error) {
	if err := e.check(leaderCtx); err != nil {
		return nil, err
	}
	l, ok := leaderCtx.Value(leaderKey{e}).(*leadership)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q: the context is not a leader context of this election", ErrNotLeader, e.name)
	case leaderCtx.Err() != nil:
		return nil, fmt.Errorf("%w: %q: %w", ErrNotLeader, e.name, context.Cause(leaderCtx))
	}
	return l, nil
}

// check rejects calls that cannot work.
func (e *Election) check(ctx context.Context) error {
	switch {
	case e == nil || e.c == nil || e.m == nil:
		return fmt.Errorf("%w: election not made by a Client (use NewElection)", ErrInvalidOption)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	case e.c.isClosed():
		return ErrClosed
	}
	return nil
}

// keep keeps the election record as long as the lock while l leads, and
// tells observers when the leadership is lost. It checks every third of
// the watchdog timeout, as the watchdog renews the lock: one script call
// per leader (not per observer). When the check finds the leadership gone
// from Redis, the hold is lost, which cancels the leader context.
func (l *leadership) keep(leaderCtx context.Context) {
	defer close(l.done)
	c := l.e.c
	every := l.e.slack()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.resign:
			return
		case <-leaderCtx.Done():
			l.lost(leaderCtx)
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(leaderCtx, every)
			res, err := c.drv.Call(ctx, nil, false, scripts.ElectionKeep, l.e.readKeys, l.owner, l.token, l.e.slack().Milliseconds()).Int64()
			cancel()
			switch {
			case err != nil:
			case res == 0:
				l.lose(leaderCtx)
			case res < 0:
				l.abdicate(leaderCtx)
			}
		}
	}
}

// lost tells observers, after the leader context ended without Resign,
// that the leadership is over. A closed Client tells nobody: its lock
// and record expire in Redis with the lease, and observers find out then.
func (l *leadership) lost(leaderCtx context.Context) {
	select {
	case <-l.resign:
		return
	default:
	}
	if l.e.c.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(leaderCtx), l.e.c.cfg.watchdogTimeout/3)
	defer cancel()
	if err := l.end(ctx); err != nil {
		l.e.c.cfg.logger.Warn("dlock: election: the end of a lost leadership was not announced; observers find out when its record expires",
			"election", l.e.name, "error", err)
	}
}

// lose ends the hold behind leaderCtx, whose leadership is gone from
// Redis: the leader context is cancelled with cause ErrLockLost.
func (l *leadership) lose(leaderCtx context.Context) {
	if acq, ok := leaderCtx.Value(l.e.m.acqKey).(*acquisition); ok {
		acq.hold.lose(fmt.Errorf("%w: %q: the leadership is gone from Redis", ErrLockLost, l.e.name))
	}
}

// abdicate ends l, whose election record is gone from Redis (deleted) while
// its lock is still held: nobody else could lead until the lock's lease ran
// out. The lock is given back in the background (bounded, retried like any
// give-back; a new hold of the owner waits for it), then the hold is lost,
// which cancels the leader context with cause ErrLockLost.
func (l *leadership) abdicate(leaderCtx context.Context) {
	acq, ok := leaderCtx.Value(l.e.m.acqKey).(*acquisition)
	if !ok || !l.e.c.holds.registered(acq.hold) {
		return
	}
	l.e.m.giveBack(request{owner: l.owner, lease: acq.hold.lease})
	acq.hold.lose(fmt.Errorf("%w: %q: the election record is gone from Redis; the lock was given back", ErrLockLost, l.e.name))
}

// slack is how long the election record outlives its lock's TTL: one keep
// interval, so that a record copied from a lock's short TTL (after a
// stall) does not expire before the next keep renews it.
func (e *Election) slack() time.Duration { return e.c.cfg.watchdogTimeout / 3 }

// end deletes l's election record and announces the end of l.
func (l *leadership) end(ctx context.Context) error {
	return l.e.c.drv.Call(ctx, nil, false, scripts.ElectionEnd, l.e.endKeys, l.owner, l.token, l.e.c.publish).Err()
}

// Leader returns the current leader; the error wraps ErrNoLeader when
// there is none.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.check(ctx); err != nil {
		return LeaderInfo{}, err
	}
	info, _, err := e.read(ctx)
	switch {
	case err != nil:
		return LeaderInfo{}, fmt.Errorf("dlock: leader %q: %w", e.name, err)
	case info.Owner == "":
		return LeaderInfo{}, fmt.Errorf("%w: %q", ErrNoLeader, e.name)
	}
	return info, nil
}

// read returns the current leader (an empty Owner: none) and how long its
// record has left (negative: none, or no expiry).
func (e *Election) read(ctx context.Context) (LeaderInfo, time.Duration, error) {
	res, err := e.c.drv.Call(ctx, nil, false, scripts.ElectionRead, e.readKeys).Slice()
	if err != nil {
		return LeaderInfo{}, 0, err
	}
	if len(res) < 1 {
		return LeaderInfo{}, 0, errors.New("unexpected reply from the election read script")
	}
	ttl, _ := res[0].(int64)
	fields := map[string]string{}
	for i := 1; i+1 < len(res); i += 2 {
		k, _ := res[i].(string)
		v, _ := res[i+1].(string)
		fields[k] = v
	}
	if len(fields) == 0 {
		return LeaderInfo{}, -1, nil
	}
	info, _ := leaderInfo(fields)
	return info, time.Duration(ttl) * time.Millisecond, nil
}

// leaderInfo decodes an election record's fields (or an end message's),
// and reports whether they announce the end of a leadership.
func leaderInfo(f map[string]string) (info LeaderInfo, ended bool) {
	info.Token, _ = strconv.ParseInt(f["token"], 10, 64)
	if f["ended"] != "" {
		return info, true
	}
	info.Owner, info.Value = f["owner"], f["value"]
	info.Seq, _ = strconv.ParseInt(f["seq"], 10, 64)
	if ms, err := strconv.ParseInt(f["since"], 10, 64); err == nil {
		info.Since = time.UnixMilli(ms)
	}
	info.Holder.PID, _ = strconv.Atoi(f["pid"])
	info.Holder.Host, info.Holder.Program, info.Holder.Name = f["host"], f["program"], f["name"]
	return info, false
}

// revision orders an election's changes: a leadership's (Token, Seq),
// and (Token, max) for its end, which comes after every change of it and
// before every later leadership.
type revision struct{ token, seq int64 }

func (r revision) after(o revision) bool {
	return r.token > o.token || r.token == o.token && r.seq > o.seq
}

func revisionOf(info LeaderInfo) revision {
	if info.Owner == "" {
		return revision{info.Token, math.MaxInt64}
	}
	return revision{info.Token, info.Seq}
}

// Observe returns a channel that receives the election's leader now and
// then every change after it, in order: a new leader, a Proclaim, and the
// end of a leadership (a LeaderInfo with an empty Owner; Resign, a loss
// the leader's Client found, or a leader gone unnoticed whose record
// expired). It never delivers a leadership older than one it delivered.
// Observers of one election on any number of Clients see the same
// changes in the same order. The channel is closed when ctx ends or the
// Client is closed.
//
// Changes are pushed: the leader's scripts publish them on the election's
// channel, received on the Client's shared subscription connection. The
// observer reads the record itself only when the subscription starts or
// was opened again (messages may have been lost meanwhile: changes in
// between are then reported as one), and when the current record's
// expiry passes (a leader that died without telling anyone): about one
// read per lease while a leader is alive. When the subscription is not
// confirmed within 5 seconds (refused: an ACL user needs the channel, see
// docs/how-it-works.md), the observer polls the record every third of
// the watchdog timeout until it is, and logs a warning. Deliveries wait for the
// receiver: an observer that is not read keeps up to 1024 changes for
// it, dropping the oldest beyond.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	if e.check(ctx) != nil {
		close(out)
		return out
	}
	w, err := e.c.hub.Listen(ctx, e.channel)
	if err != nil {
		e.c.cfg.logger.Warn("dlock: election: observe: subscription failed", "election", e.name, "error", err)
		close(out)
		return out
	}
	go e.observe(ctx, w, out)
	return out
}

// observer is the state of one Observe: the changes not yet delivered and
// the revision of the latest one taken.
type observer struct {
	last    revision
	leading bool // the latest change taken is a leader (not an end)
	pending []LeaderInfo
}

// take queues info unless it is not newer than the latest change, or a
// second end in a row.
func (o *observer) take(info LeaderInfo) {
	r := revisionOf(info)
	if !r.after(o.last) {
		return
	}
	o.last = r
	if info.Owner == "" && !o.leading {
		return // no leader, and the observer was told so already
	}
	o.leading = info.Owner != ""
	if len(o.pending) >= maxPending {
		o.pending = o.pending[1:] // a receiver this far behind misses the oldest
	}
	o.pending = append(o.pending, info)
}

// maxPending bounds the changes an observer keeps for a receiver that
// does not read them.
const maxPending = 1024

// observe runs one Observe until ctx ends or the Client is closed.
func (e *Election) observe(ctx context.Context, w *pubsub.Waiter, out chan<- LeaderInfo) {
	defer close(out)
	defer w.Close(true)
	o := &observer{leading: true} // so that "no leader" is delivered first
	ready := w.Ready()
	wait := time.NewTimer(observeSubscribeWait)
	select {
	case <-ready:
		ready = nil
	case <-wait.C:
		// Refused (an ACL without the channel) or Redis too slow: poll
		// until the subscription is confirmed, if it ever is.
		e.c.cfg.logger.Warn("dlock: election: observe: subscription not confirmed; polling the record until it is",
			"election", e.name, "every", e.pollEvery())
	case <-ctx.Done():
		return
	case <-e.c.done:
		return
	}
	wait.Stop()
	safety := time.NewTimer(0) // the first read
	defer safety.Stop()
	for {
		var send chan<- LeaderInfo
		var next LeaderInfo
		if len(o.pending) > 0 {
			send, next = out, o.pending[0]
		}
		select {
		case <-ctx.Done():
			return
		case <-e.c.done:
			return
		case send <- next:
			o.pending = o.pending[1:]
		case <-w.Wake():
			msgs, gap := w.Messages()
			for _, m := range msgs {
				var f map[string]string
				if json.Unmarshal([]byte(m), &f) == nil {
					info, _ := leaderInfo(f)
					o.take(info)
				}
			}
			if gap {
				safety.Reset(0)
			}
		case <-ready: // confirmed at last: pushed from now on
			ready = nil
			safety.Reset(0)
		case <-safety.C:
			next := e.reread(ctx, o)
			if ready != nil {
				next = min(next, e.pollEvery())
			}
			safety.Reset(next)
		}
	}
}

// observeSubscribeWait is how long Observe waits for its subscription to
// be confirmed before it polls the record instead.
const observeSubscribeWait = 5 * time.Second

// pollEvery is how often an observer whose subscription is not confirmed
// reads the record: a third of the watchdog timeout.
func (e *Election) pollEvery() time.Duration { return e.c.cfg.watchdogTimeout / 3 }

// reread reads the current leader for o, and returns when to read again:
// when the leader's record expires (it is renewed while the leader
// lives), or a lease from now when there is no leader.
func (e *Election) reread(ctx context.Context, o *observer) time.Duration {
	lease := e.c.cfg.watchdogTimeout
	rctx, cancel := context.WithTimeout(ctx, lease/3)
	defer cancel()
	info, ttl, err := e.read(rctx)
	switch {
	case err != nil:
		return lease / 3
	case info.Owner == "":
		// No leader: an end after the latest leadership seen.
		o.take(LeaderInfo{Token: o.last.token})
		return lease
	}
	o.take(info)
	if ttl <= 0 {
		return lease
	}
	return ttl + ttl/10 + time.Millisecond
}
