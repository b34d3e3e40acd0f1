package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/clock"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// What the synchronizers (Semaphore, PermitSemaphore, CountDownLatch)
// share: checks, script calls (on the Client's transport, as lock scripts
// run), and what a Semaphore's Acquire and a latch's Await contribute to
// the one acquire loop (acquire.go): syncWait, waiting by pub/sub with a
// bounded poll. A PermitSemaphore's Acquire runs in that loop as a lock
// kind does (psemKind, permit_semaphore.go).

// syncPoll bounds how long a waiting Acquire or Await sleeps without a
// message before it tries again. Messages can be lost (a reconnect, a
// failover; Redisson publishes nothing when a permit expires), so this is
// what a lost message costs, never a hang.
const syncPoll = time.Second

// syncCheck rejects calls that cannot work: a nil or closed Client, a nil
// context.
func syncCheck(c *Client, ctx context.Context, what string) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: %s not made by a Client (use its New%s)", ErrInvalidOption, what, what)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	case c.isClosed():
		return ErrClosed
	}
	return nil
}

// newSync validates a synchronizer's name on c.
func newSync(c *Client, name string) error {
	if c == nil {
		return fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	if c.isClosed() {
		return ErrClosed
	}
	return validateName(name)
}

// ErrNoReply is wrapped by the error of an operation whose reply was lost
// (a timeout, a connection broken after the command was sent) when the
// operation is not idempotent: Semaphore Acquire, TryAcquire, Release and
// AddPermits, PermitSemaphore AddPermits, CountDownLatch CountDown. Redis
// may or may not have applied it. dlock does not send it again, and has
// go-redis not send it again, since applying it twice would take or give
// back permits twice; check the state (AvailablePermits, Count) before
// trying again.
var ErrNoReply = transport.ErrNoReply

// runScript runs a synchronizer script on the Client's transport, as lock
// scripts run: not at all while Redis is unreachable (an error wrapping
// ErrUnreachable, at once), and with retries of the refusals that
// guarantee the script did not run (a cluster migrating or electing, a
// demoted or masterless node, a loading server) while ctx allows, at most
// a few seconds when ctx has no deadline. An idempotent script is batched
// with the Client's other scripts and go-redis sends it again after a lost
// reply; a script that is not idempotent goes alone and at most once (a
// failed dial, which sent nothing, is retried), and a lost reply is
// reported as ErrNoReply (transport.RunOnce says why it goes alone).
func runScript(ctx context.Context, c *Client, s scripts.Script, keys []string, args ...any) *redis.Cmd {
	return c.drv.Call(ctx, nil, !s.Idempotent, s.Script, keys, args...)
}

// runWrite is runScript for a write whose loss in a failover matters (it
// takes, gives or sets permits, sets or counts down a latch): with
// WithReplicaSync, WAIT follows it on its connection, and short, wrapping
// ErrNotReplicated, says that fewer replicas than asked acknowledged it in
// time. The write stands on the master all the same: the caller decides
// what follows (an acquire gives back what it took).
func runWrite(ctx context.Context, c *Client, s scripts.Script, keys []string, args ...any) (cmd *redis.Cmd, short error) {
	var chk *transport.Check
	if c.drv.Synced() {
		chk = new(transport.Check)
	}
	cmd = c.drv.Call(ctx, chk, !s.Idempotent, s.Script, keys, args...)
	return cmd, chk.Failed()
}

// notReplicated is the error of a synchronizer write that stands on the
// master but that too few replicas acknowledged (runWrite's short).
func notReplicated(what string, short error) error {
	return fmt.Errorf("dlock: %s: applied on the master, not acknowledged by enough replicas in time (a failover may lose it): %w", what, short)
}

// noAnswer reports an error that says Redis did not answer, or refused for
// the moment: a timeout, a broken or refused connection, a cluster without
// a master for the slot. Trying again later may work.
func noAnswer(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || transport.Transient(err)
}

// errGaveUp marks a wait that ctx ended; syncWait wraps it with ctx's
// error.
var errGaveUp = errors.New("gave up")

// syncWait is the contender (acquire.go) of a call without a hold: a
// Semaphore's Acquire, a latch's Await. The primitive contributes try,
// one attempt (its script and its reply rule: done, or how long to sleep
// at most, 0 for syncPoll), its channel and, for a latch, extra, another
// wake-up. Its sleeps end at a message on channel, a receive on extra,
// the attempt's wait (bounded by syncPoll) or the end of ctx. A
// subscription that fails (a broken connection, a refusal) is logged,
// that sleep polls, and the next one subscribes again. When ctx ends
// first the loop's error wraps errGaveUp and ctx's error; when the Client
// is closed, ErrClosed.
type syncWait struct {
	sleeper
	c       *Client
	channel string
	extra   <-chan struct{}
	try     func() (done bool, wait time.Duration, err error)
	ob      *lockObs
	used    bool // the wait is over: a wake-up it had was used
}

// newSyncWait returns the contender of a call on c whose attempts are try
// and whose wake-ups come on channel and extra.
func newSyncWait(c *Client, channel string, extra <-chan struct{}, ob *lockObs, try func() (bool, time.Duration, error)) *syncWait {
	return &syncWait{sleeper: sleeper{hub: c.hub}, c: c, channel: channel, extra: extra, try: try, ob: ob}
}

func (w *syncWait) attempt(context.Context, bool) (bool, attemptResult, error) {
	done, d, err := w.try()
	w.used = done
	return done, attemptResult{ttl: d}, err
}

func (w *syncWait) sleep(ctx context.Context, res attemptResult) (bool, error) {
	if ctxErr(ctx) != nil {
		return false, fmt.Errorf("%w: %w", errGaveUp, ctxErr(ctx))
	}
	d := res.ttl
	if d <= 0 || d > syncPoll {
		d = syncPoll
	}
	w.arm(d)
	wake, err := w.wakeUps(ctx, w.channel, false)
	switch {
	case err == nil:
	case ctxErr(ctx) != nil:
		return false, fmt.Errorf("%w: %w", errGaveUp, ctxErr(ctx))
	case errors.Is(err, pubsub.ErrClosed):
		return false, ErrClosed
	default:
		w.c.cfg.logger.Warn("dlock: subscribing failed; polling meanwhile", "channel", w.channel, "error", err)
	}
	select {
	case <-wake:
	case <-w.extra:
	case <-w.timer.C:
	case <-ctx.Done():
		return false, fmt.Errorf("%w: %w", errGaveUp, ctxErr(ctx))
	}
	if w.c.isClosed() {
		return false, ErrClosed
	}
	return false, nil
}

// busy is never asked for: these calls always wait (TryAcquire makes its
// one try without the loop).
func (w *syncWait) busy(attemptResult) error { return ErrNotObtained }

func (w *syncWait) gate() *transport.Gate { return w.c.drv.Gate() }

// outlast: an error that is not an outage ends the wait.
func (w *syncWait) outlast(error, time.Duration) bool { return false }

func (w *syncWait) observer() *lockObs { return w.ob }

// end stops the sleeps; the caller reports to the observers, with the
// error it makes of the loop's.
func (w *syncWait) end(error) { w.stop(w.used) }

// nowMillis is the local clock in epoch ms, the clock Redisson's permit
// semaphore passes to its scripts: t's wall-clock reading moved by the
// test seam internal/clock (0 outside the verify/ harness). dlock's
// permit scripts get it in ARGV[1] but do not read it: they take the time
// from the server (psem_clock.lua), so that a client's clock jump changes
// nothing (TestPermitClockJump, the verify/ row single, clock-jump, sem).
func nowMillis(t time.Time) int64 { return t.Add(clock.Offset()).UnixMilli() }
