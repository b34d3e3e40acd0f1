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

// runScript runs a synchronizer script. These scripts are not idempotent
// (running a release twice gives back twice the permits), so only refusals
// that guarantee the script did not run are retried: a cluster migrating
// or electing (TRYAGAIN, CLUSTERDOWN, MOVED/ASK past go-redis' redirects),
// a demoted or masterless node (READONLY, MASTERDOWN), a loading server
// (LOADING). They are retried while ctx allows, at most refusalBudget
// when ctx has no deadline.
func runScript(ctx context.Context, c *Client, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(refusalBudget)
	}
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		cmd := s.Run(ctx, c.rdb, keys, args...)
		err := cmd.Err()
		var reply redis.Error
		if cc, ok := c.rdb.(*redis.ClusterClient); ok && err != nil && !errors.As(err, &reply) && ctx.Err() == nil {
			// A node that stopped answering sends no MOVED: have the
			// slot map reloaded so that the next call finds the new master.
			cc.ReloadState(ctx)
		}
		if !refused(err) || time.Now().Add(pause).After(deadline) {
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

// refusalBudget bounds the retries of a refused script for a ctx without
// deadline.
const refusalBudget = 5 * time.Second

// refused reports an error reply that means the script was not run and
// will be served later.
func refused(err error) bool {
	if err == nil {
		return false
	}
	_, ask := redis.IsAskError(err)
	_, moved := redis.IsMovedError(err)
	return ask || moved || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) || redis.IsLoadingError(err)
}

// noAnswer reports an error that says Redis did not answer, or refused for
// the moment: a timeout, a broken or refused connection, a cluster without
// a master for the slot. Trying again later may work.
func noAnswer(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || refused(err)
}

// doneErr is ctx's error, counting a deadline that has passed as exceeded
// even before ctx's timer fired (a socket deadline set from ctx can fail a
// command a moment earlier). It is nil while ctx is live.
func doneErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
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
		if err := doneErr(ctx); err != nil {
			return fmt.Errorf("%w: %w", errGaveUp, err)
		}
		if d <= 0 || d > syncPoll {
			d = syncPoll
		}
		timer.Reset(d)
		var wake <-chan struct{}
		if w == nil {
			if w, err = c.hub.Subscribe(ctx, channel); err != nil {
				if err := doneErr(ctx); err != nil {
					return fmt.Errorf("%w: %w", errGaveUp, err)
				}
				if errors.Is(err, pubsub.ErrClosed) {
					return ErrClosed
				}
				return fmt.Errorf("subscribe %s: %w", channel, err)
			}
			wake = w.Ready()
		} else {
			wake = w.Wake()
		}
		select {
		case <-wake:
		case <-extra:
		case <-timer.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errGaveUp, doneErr(ctx))
		}
		if c.isClosed() {
			return ErrClosed
		}
	}
}

// nowMillis is the local clock in epoch ms, the clock Redisson's permit
// semaphore passes to its scripts.
func nowMillis(t time.Time) int64 { return t.UnixMilli() }
