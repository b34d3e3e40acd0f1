package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the tests of this file tell a waiter woken by a message from one
// woken by its poll: a waiting Acquire sleeps after each failed try until a
// message or syncPoll (1 s) has passed. Timed from the waiter's last try
// before the wake-up, a poll comes more than syncPoll later, always; a
// message comes a few round trips later. wakeBound sits between the two,
// leaving the message path 4/5 of a second of scheduling delay on a
// loaded machine while a poll can never pass it.
const wakeBound = syncPoll * 4 / 5

// scriptReplies is a go-redis hook that sends on replies the time of each
// reply to a script call (EVALSHA or EVAL) whose first key is key: one per
// try of a waiter whose Client uses the hooked Redis client. Error replies
// are not sent: a NOSCRIPT (the EVALSHA that Script.Run and evalOnce follow
// with an EVAL, which together make one try, not two) or a broken
// connection. A nil reply (redis.Nil) is sent.
type scriptReplies struct {
	key     string
	replies chan time.Time
}

// probeScripts returns a Redis client whose script calls on key are
// reported by the returned hook.
func probeScripts(t testing.TB, key string) (*redis.Client, *scriptReplies) {
	rdb := newRedis(t)
	p := &scriptReplies{key: key, replies: make(chan time.Time, 1024)}
	rdb.AddHook(p)
	return rdb, p
}

func (p *scriptReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *scriptReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// Here go-redis has not set cmd's error yet: Err() is nil (and
		// Val() too for a NOSCRIPT reply) until the hooks return. The
		// reply's error, redis.Nil included, is next's result.
		p.note(cmd, err)
		return err
	}
}

func (p *scriptReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			p.note(cmd, cmd.Err()) // a pipeline's commands carry their errors
		}
		return err
	}
}

// note sends the time of cmd's reply if cmd is a script call on p.key
// that ran: err, the reply's error, is nil or redis.Nil.
func (p *scriptReplies) note(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if name := strings.ToLower(cmd.Name()); name != "evalsha" && name != "eval" || len(args) < 4 || args[3] != p.key {
		return
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	select {
	case p.replies <- time.Now():
	default: // a test reads only the replies it waits for
	}
}

// drain forgets the replies seen so far.
func (p *scriptReplies) drain() {
	for {
		select {
		case <-p.replies:
		default:
			return
		}
	}
}

// awaitSubscribed waits until c's hub has a waiter on channel whose
// subscription Redis has confirmed (the hub's Ready, which a second waiter
// on the channel shares, and PUBSUB NUMSUB), failing the test if not within
// 10 s: a message published on channel after it returns reaches the
// waiter.
func awaitSubscribed(t testing.TB, c *Client, channel, what string) {
	t.Helper()
	waitForSyncWaiters(t, c, channel, 1)
	ctx := boundedCtx(t, 10*time.Second)
	w, err := c.hub.Subscribe(ctx, channel)
	if err != nil {
		t.Fatalf("%s: joining the subscription to %s: %v", what, channel, err)
	}
	recv(t, w.Ready(), 10*time.Second, what+": the confirmation of the subscription to "+channel)
	w.Close(false) // not woken: nothing was published meanwhile
	eventually(t, 10*time.Second, func() error {
		n, err := c.rdb.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			return err
		}
		if n[channel] < 1 {
			return fmt.Errorf("%s: PUBSUB NUMSUB %s = %d, want the waiter's subscription", what, channel, n[channel])
		}
		return nil
	})
}

// timeWake measures how a waiter is woken. It starts acquire (a waiting
// Acquire on c, whose script calls probe reports, sleeping on channel) in
// a goroutine and waits for its first try and for its next one, which
// follows the confirmation of its subscription (or, on a slow machine,
// its poll). Once the subscription is confirmed and no try is under way
// (the last one replied less than syncPoll/2 ago, and none since), it
// runs wake, which must not let a try succeed by itself. It returns how
// long after the waiter's last try before wake acquire returned: without
// a message that wakes it, its next try comes syncPoll after that one, so
// the result is then more than syncPoll.
func timeWake(t *testing.T, probe *scriptReplies, c *Client, channel, what string, acquire func() error, wake func()) time.Duration {
	t.Helper()
	probe.drain()
	got := make(chan error, 1)
	go func() { got <- acquire() }()
	recv(t, probe.replies, 10*time.Second, what+": the waiter's first try")
	slept := recv(t, probe.replies, 10*time.Second, what+": the waiter's try once subscribed")
	awaitSubscribed(t, c, channel, what)
	for {
		select {
		case at := <-probe.replies: // a poll came meanwhile: measure from it
			slept = at
			continue
		default:
		}
		if time.Since(slept) < syncPoll/2 {
			break
		}
		// The next poll is due within syncPoll/2: wait for its reply
		// rather than wake the waiter while that try is on its way.
		slept = recv(t, probe.replies, 10*time.Second, what+": the waiter's poll")
	}
	wake()
	if err := recv(t, got, 10*time.Second, what+": the waiter's Acquire"); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return time.Since(slept)
}

// TestSemaphoreSetAndAddWake: TrySetPermits and AddPermits on another
// Client wake a waiting Acquire by their message, at once, not at its poll.
func TestSemaphoreSetAndAddWake(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	rdb, probe := probeScripts(t, name)
	s := mustSemaphore(t, newClient(t, rdb), name)
	other := mustSemaphore(t, newClient(t, nil), name)
	// Have Redis load the acquire script first (a TryAcquire that finds no
	// permits): the waiter's every try is then one EVALSHA, in this test
	// alone as after others (the probe skips a NOSCRIPT reply anyway).
	if ok, err := s.TryAcquire(ctx, 1); ok || err != nil {
		t.Fatalf("TryAcquire on a semaphore not set: %v %v", ok, err)
	}
	for _, tc := range []struct {
		what string
		wake func() error
	}{
		{"TrySetPermits(1)", func() error {
			ok, err := other.TrySetPermits(ctx, 1)
			if err == nil && !ok {
				err = errors.New("the semaphore was set already")
			}
			return err
		}},
		{"AddPermits(1)", func() error { return other.AddPermits(ctx, 1) }},
	} {
		d := timeWake(t, probe, s.c, s.channel, tc.what, func() error { return s.Acquire(ctx, 1) }, func() {
			if err := tc.wake(); err != nil {
				t.Fatalf("%s: %v", tc.what, err)
			}
		})
		t.Logf("waiter acquired %v after its last try, woken by %s", d, tc.what)
		if d >= wakeBound {
			t.Errorf("waiter acquired %v after its last try (%s on another Client meanwhile): woken by its %v poll, not by the message", d, tc.what, syncPoll)
		}
		wantPermits(t, s, 0)
	}
}

// TestPermitSemaphoreReleaseWakes: the release of a permit on another
// Client wakes a waiting Acquire by its message, at once, not at its poll
// (the held permit's expiry, a watchdog lease, is far off).
func TestPermitSemaphoreReleaseWakes(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	rdb, probe := probeScripts(t, name)
	s := mustPermitSemaphore(t, newClient(t, rdb), name)
	holder := mustPermitSemaphore(t, newClient(t, nil), name)
	if ok, err := holder.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got context.Context
	d := timeWake(t, probe, s.c, s.channel, "permit release", func() (err error) {
		got, err = s.Acquire(ctx)
		return err
	}, func() {
		if err := holder.Release(p); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("waiter acquired %v after its last try, woken by the release", d)
	if d >= wakeBound {
		t.Errorf("waiter acquired %v after its last try (a release on another Client meanwhile): woken by its %v poll, not by the release's message", d, syncPoll)
	}
	if err := s.Release(got); err != nil {
		t.Fatal(err)
	}
	wantAvailable(t, s, 1, 0)
}

// TestPermitSemaphoreRenewalFindsLoss: a renewed permit that another
// process gives back by its id ends at the holder's next renewal (every
// third of the watchdog timeout), with a cause that says so, not when its
// local lease runs out.
func TestPermitSemaphoreRenewalFindsLoss(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	const lease = 6 * time.Second // renewed every 2 s
	hs := mustPermitSemaphore(t, newClient(t, nil, WithWatchdogTimeout(lease)), name)
	s := mustPermitSemaphore(t, newClient(t, nil), name)
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	p, err := hs.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := hs.PermitID(p)
	taken := time.Now()
	if err := s.ReleaseID(ctx, id); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, p, lease+5*time.Second, "the context of a permit given back by its id")
	d := time.Since(taken)
	cause := context.Cause(p)
	t.Logf("permit context ended %v after its permit was given back: %v", d, cause)
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "reclaimed or deleted") {
		t.Errorf("permit context ended with %v; want ErrLockLost from the renewal (the permit was reclaimed or deleted)", cause)
	}
	// The first renewal comes lease/3 after the Acquire; the local lease
	// runs out lease after it.
	if d >= 2*lease/3 {
		t.Errorf("permit context ended %v after the permit was given back; want it at the next renewal (every %v)", d, lease/3)
	}
	if err := hs.Release(p); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of a permit given back by id: %v, want ErrNotHeld", err)
	}
	wantAvailable(t, s, 1, 0)
}
