package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

var demoUsage = `Usage: dlock demo [--redis URL]

A live demo of what dlock does, as a timeline (seconds since the start,
who, what), in about 15 seconds:

  1. three workers contend for one lock; each unlock wakes the next waiter
     over pub/sub at once
  2. the watchdog renews the lease of a job that runs longer than it
  3. a holder crashes without unlocking; its lock expires and another
     worker takes it over
  4. a fair lock serves its waiters in the order they came
  5. readers share a read-write lock while a writer waits for them

Without --redis the demo starts a throwaway redis-server (it must be on
PATH) on a free port in a temporary directory, and removes both at the
end. With --redis it uses keys under "dlock-demo:" and deletes them after.

Flags:
  --redis URL   use this Redis instead of a throwaway redis-server
`

// parseDemo reads the command line of dlock demo without acting on it. No
// endpoints means a throwaway redis-server.
func (c *cli) parseDemo(args []string) ([]endpoint, error) {
	fs := newFlagSet("demo")
	conn := addConnFlags(fs)
	pos, err := c.parse(fs, demoUsage, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageError("demo: unexpected argument %q", pos[0])
	}
	if len(conn.urls) == 0 {
		return nil, nil
	}
	eps, err := c.endpoints(conn)
	if err == nil && len(eps) > 1 {
		err = usageError("demo: one --redis expected, got %d", len(eps))
	}
	return eps, err
}

func (c *cli) demoCmd(ctx context.Context, args []string) error {
	eps, err := c.parseDemo(args)
	if err != nil {
		return err
	}
	// Ctrl-C ends the demo early, but still through the cleanup below.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	tl := newTimeline(c.stdout)
	var ep endpoint
	if eps == nil {
		srv, err := startLocalRedis(ctx)
		if err != nil {
			return exitf(exitFailure, "demo: %v", err)
		}
		defer func() {
			if err := srv.stop(); err != nil {
				fmt.Fprintf(c.stderr, "dlock: demo: removing %s: %v\n", srv.dir, err)
			}
		}()
		tl.say("dlock demo: a throwaway redis-server on %s (data in %s, removed at the end)", srv.addr, srv.dir)
		if ep, err = parseEndpoint("redis://" + srv.addr); err != nil {
			return err
		}
	} else {
		ep = eps[0]
		tl.say("dlock demo on %s (keys under %q, deleted at the end)", ep.display, demoPrefix+"*")
	}
	rdb := ep.open()
	defer rdb.Close()
	if err := pingOne(ctx, ep, rdb); err != nil {
		return err
	}
	// On a throwaway server the names can be short; on a shared one a
	// random part keeps two demos apart.
	prefix := "demo:"
	if eps != nil {
		prefix = demoPrefix + randomID() + ":"
	}
	d := &demo{rdb: rdb, tl: tl, prefix: prefix}
	defer d.cleanup()

	tl.say("Each line: seconds since the start, who, what happened. Every worker is a")
	tl.say("separate dlock Client, as if it were a separate process.")
	err = d.play(ctx)
	if ctx.Err() != nil {
		return exitf(exitSignalBase+int(syscall.SIGINT), "demo: interrupted")
	}
	if err != nil {
		return exitf(exitFailure, "demo: %v", err)
	}
	return nil
}

// demoPrefix starts the name of every key the demo writes.
const demoPrefix = "dlock-demo:"

// demo is one run of the demo: its Redis, its timeline, the Clients it
// made (closed at the end) and the findings for the summary.
type demo struct {
	rdb     redis.UniversalClient
	tl      *timeline
	prefix  string
	clients []*dlock.Client
	summary []string
}

// scene is one part of the demo; it returns its line of the summary.
type scene struct {
	title, explain string
	play           func(ctx context.Context) (string, error)
}

func (d *demo) play(ctx context.Context) error {
	scenes := []scene{
		{"Contention: three workers, one lock",
			"Waiters sleep on a pub/sub channel: an unlock wakes them at once, no polling.\n" +
				"A plain lock is not fair: the first to ask after the unlock gets it (see 4).",
			d.contention},
		{"The watchdog: a job longer than its lease",
			"Without a fixed lease, the lease is the watchdog timeout (1.5s here, 30s by default)\n" +
				"and the holder's watchdog renews it every third of that while the job runs.",
			d.watchdog},
		{"A crashed holder",
			"A holder that dies stops renewing; its lock expires and a waiter takes over.",
			d.crash},
		{"Fair lock: first come, first served",
			"Waiters queue in Redis (redisson_lock_queue) and get the lock in arrival order.",
			d.fair},
		{"Read-write lock: readers share, a writer waits",
			"Many readers at once, or one writer alone.",
			d.readWrite},
	}
	for i, s := range scenes {
		d.tl.section(i+1, s.title, s.explain)
		line, err := s.play(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", s.title, err)
		}
		d.summary = append(d.summary, line)
	}
	d.tl.say("")
	d.tl.say("Summary (%.1fs)", time.Since(d.tl.start).Seconds())
	for _, line := range d.summary {
		d.tl.say("  - %s", line)
	}
	d.tl.say("")
	d.tl.say(`Next: "dlock run NAME -- COMMAND" runs a command under a lock, "dlock status NAME"`)
	d.tl.say(`shows who holds it; "dlock help" has the rest.`)
	return nil
}

// client returns a new dlock Client, closed at the end of the demo.
func (d *demo) client(opts ...dlock.Option) (*dlock.Client, error) {
	c, err := dlock.New(d.rdb, opts...)
	if err != nil {
		return nil, err
	}
	d.clients = append(d.clients, c)
	return c, nil
}

// cleanup closes the Clients and deletes the demo's keys.
func (d *demo) cleanup() {
	for _, c := range d.clients {
		_ = c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	iter := d.rdb.Scan(ctx, 0, "*"+d.prefix+"*", scanCount).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for _, k := range keys {
		d.rdb.Del(ctx, k)
	}
}

// key is the name of one of the demo's locks.
func (d *demo) key(name string) string { return d.prefix + name }

// pause sleeps for the demo's pacing, or until ctx ends.
func pause(ctx context.Context, dur time.Duration) error {
	select {
	case <-time.After(dur):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFor polls cond every 5 ms until it holds, for up to 5 s: the demo
// waits for Redis to show what a worker did before the next one acts, so
// that the timeline reads the same on every run.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting until " + what)
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// millisText formats a duration in milliseconds with one decimal.
func millisText(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// secondsText formats a duration in seconds with one decimal.
func secondsText(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}
