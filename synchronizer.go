package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// What the synchronizers (Semaphore, PermitSemaphore, CountDownLatch)
// share: checks, script calls (on the Client's transport, as lock scripts
// run), and waiting by pub/sub with a bounded poll.

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
	return c.tr.Call(ctx, nil, !s.Idempotent, s.Script, keys, args...)
}

// runWrite is runScript for a write whose loss in a failover matters (it
// takes, gives or sets permits, sets or counts down a latch): with
// WithReplicaSync, WAIT follows it on its connection, and short, wrapping
// ErrNotReplicated, says that fewer replicas than asked acknowledged it in
// time. The write stands on the master all the same: the caller decides
// what follows (an acquire gives back what it took).
func runWrite(ctx context.Context, c *Client, s scripts.Script, keys []string, args ...any) (cmd *redis.Cmd, short error) {
	var chk *transport.Check
	if c.tr.Synced() {
		chk = new(transport.Check)
	}
	cmd = c.tr.Call(ctx, chk, !s.Idempotent, s.Script, keys, args...)
	return cmd, chk.Failed()
}

// outageOver reports, for a waiting call whose attempt failed with err,
// whether Redis was unreachable (the reach gate is shut) and can be
// reached again now: it waits for the gate to open, as long as ctx
// allows, so that a waiting Acquire waits out an outage as Lock does
// rather than fail at once or dial through it.
func (c *Client) outageOver(ctx context.Context, err error) bool {
	return errors.Is(err, ErrUnreachable) && c.tr.Gate().Wait(ctx)
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

// attemptFunc makes one try. It reports whether the wait is over, and
// otherwise how long to sleep at most before the next try (0: syncPoll).
type attemptFunc func() (done bool, wait time.Duration, err error)

// errGaveUp marks a wait that ctx ended; wait wraps it with ctx's error.
var errGaveUp = errors.New("gave up")

// wait calls attempt until it is done or fails, sleeping in between
// (sleeper) until a message on channel, the attempt's wait (bounded by
// syncPoll), or a receive on extra. Its first sleep subscribes and ends
// once the subscription is confirmed, so a message published in between
// is not missed. A subscription that fails (a broken connection, a
// refusal) is logged, that sleep polls, and the next one subscribes again.
// It returns an error wrapping errGaveUp and ctx's error when ctx ends
// first, and ErrClosed when the Client is closed.
func wait(ctx context.Context, c *Client, channel string, extra <-chan struct{}, attempt attemptFunc) error {
	s := sleeper{hub: c.hub}
	used := false
	defer func() { s.stop(used) }()
	for {
		done, d, err := attempt()
		switch {
		case err != nil:
			return err
		case done:
			used = true
			return nil
		case ctxErr(ctx) != nil:
			return fmt.Errorf("%w: %w", errGaveUp, ctxErr(ctx))
		}
		if d <= 0 || d > syncPoll {
			d = syncPoll
		}
		s.arm(d)
		wake, err := s.wakeUps(ctx, channel, false)
		switch {
		case err == nil:
		case ctxErr(ctx) != nil:
			return fmt.Errorf("%w: %w", errGaveUp, ctxErr(ctx))
		case errors.Is(err, pubsub.ErrClosed):
			return ErrClosed
		default:
			c.cfg.logger.Warn("dlock: subscribing failed; polling meanwhile", "channel", channel, "error", err)
		}
		select {
		case <-wake:
		case <-extra:
		case <-s.timer.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errGaveUp, ctxErr(ctx))
		}
		if c.isClosed() {
			return ErrClosed
		}
	}
}

// nowMillis is the local clock in epoch ms, the clock Redisson's permit
// semaphore passes to its scripts.
func nowMillis(t time.Time) int64 { return t.UnixMilli() }
