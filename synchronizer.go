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
	"github.com/redis/go-redis/v9"
)

// What the synchronizers (Semaphore, PermitSemaphore, CountDownLatch)
// share: checks, script calls, and waiting by pub/sub with a bounded poll.

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
var ErrNoReply = errors.New("dlock: no reply; the operation may or may not have been applied")

// runScript runs a synchronizer script. Refusals that guarantee the script
// did not run are retried: a cluster migrating or electing (TRYAGAIN,
// CLUSTERDOWN, MOVED/ASK past go-redis' redirects), a demoted or masterless
// node (READONLY, MASTERDOWN), a loading server (LOADING). They are retried
// while ctx allows, at most refusalBudget when ctx has no deadline.
// go-redis itself sends an idempotent script again after a lost reply; a
// script that is not idempotent is sent once (a failed dial, which sent
// nothing, is retried here), and a lost reply is reported as ErrNoReply.
func runScript(ctx context.Context, c *Client, s scripts.Script, keys []string, args ...any) *redis.Cmd {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(refusalBudget)
	}
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		var cmd *redis.Cmd
		if s.Idempotent {
			cmd = s.Run(ctx, c.rdb, keys, args...)
		} else {
			cmd = evalOnce(ctx, c.rdb, s, keys, args)
		}
		err := cmd.Err()
		var reply redis.Error
		if cc, ok := c.rdb.(*redis.ClusterClient); ok && err != nil && !errors.As(err, &reply) && ctx.Err() == nil {
			// A node that stopped answering sends no MOVED: have the
			// slot map reloaded so that the next call finds the new master.
			cc.ReloadState(ctx)
		}
		retry := transient(err) || !s.Idempotent && notSent(err)
		if !retry || time.Now().Add(pause).After(deadline) {
			if err != nil && !s.Idempotent && !errors.As(err, &reply) && !notSent(err) {
				cmd.SetErr(fmt.Errorf("%w: %w", ErrNoReply, err))
			}
			return cmd
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return cmd
		}
	}
}

// onceCmd is a command go-redis must not send again on its own.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// evalOnce runs s by EVALSHA, and by EVAL when the server does not have it
// (NOSCRIPT: nothing ran), each sent at most once.
func evalOnce(ctx context.Context, rdb redis.UniversalClient, s scripts.Script, keys []string, args []any) *redis.Cmd {
	cmd := evalCmd(ctx, "evalsha", s.Hash(), keys, args)
	_ = rdb.Process(ctx, onceCmd{cmd})
	if errors.Is(cmd.Err(), redis.ErrNoScript) || redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = evalCmd(ctx, "eval", s.Src, keys, args)
		_ = rdb.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

func evalCmd(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// notSent reports an error that shows the command never left: no
// connection could be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}

// refusalBudget bounds the retries of a refused script for a ctx without
// deadline.
const refusalBudget = 5 * time.Second

// noAnswer reports an error that says Redis did not answer, or refused for
// the moment: a timeout, a broken or refused connection, a cluster without
// a master for the slot. Trying again later may work.
func noAnswer(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || transient(err)
}

// attemptFunc makes one try. It reports whether the wait is over, and
// otherwise how long to sleep at most before the next try (0: syncPoll).
type attemptFunc func() (done bool, wait time.Duration, err error)

// errGaveUp marks a wait that ctx ended; wait wraps it with ctx's error.
var errGaveUp = errors.New("gave up")

// wait calls attempt until it is done or fails, sleeping in between until
// a message on channel, the attempt's wait (bounded by syncPoll), or a
// receive on extra. It subscribes after the first failed try and tries
// again once the subscription is confirmed, so a message published in
// between is not missed. It returns an error wrapping errGaveUp and ctx's
// error when ctx ends first, and ErrClosed when the Client is closed.
func wait(ctx context.Context, c *Client, channel string, extra <-chan struct{}, attempt attemptFunc) error {
	var w *pubsub.Waiter
	consumed := false
	defer func() {
		if w != nil {
			w.Close(consumed)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		done, d, err := attempt()
		if err != nil {
			return err
		}
		if done {
			consumed = true
			return nil
		}
		if err := ctxErr(ctx); err != nil {
			return fmt.Errorf("%w: %w", errGaveUp, err)
		}
		if d <= 0 || d > syncPoll {
			d = syncPoll
		}
		timer.Reset(d)
		var wake <-chan struct{} // nil: only the timer (and extra) wake
		if w == nil {
			if w, err = c.hub.Subscribe(ctx, channel); err != nil {
				w = nil
				if err := ctxErr(ctx); err != nil {
					return fmt.Errorf("%w: %w", errGaveUp, err)
				}
				if errors.Is(err, pubsub.ErrClosed) {
					return ErrClosed
				}
				// The subscription connection broke (or Redis refused):
				// poll this round and subscribe again at the next.
				c.cfg.logger.Warn("dlock: subscribing failed; polling meanwhile", "channel", channel, "error", err)
			} else {
				wake = w.Ready()
			}
		} else {
			wake = w.Wake()
		}
		select {
		case <-wake:
		case <-extra:
		case <-timer.C:
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
