package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

var demoUsage = `Usage: dlock demo [--redis URL]

A live demo of what dlock does, as a timeline (seconds since the start,
who, what), in about 6 seconds:

  1. three workers contend for one lock; each unlock wakes the next waiter
     over pub/sub at once
  2. the watchdog renews a holder's lease while it lives; when the holder
     crashes, its lock expires and a waiter takes over
  3. a fair lock serves its waiters in the order they came
  4. readers share a read-write lock while a writer waits for them

Without --redis the demo starts a throwaway redis-server on a unix socket
in a temporary directory, and removes both at the end; with no
redis-server on PATH it runs on an embedded Redis-compatible server
(miniredis) instead, and says so. With --redis it uses keys under
"dlock-demo:" and deletes them after.

Flags:
  --redis URL   use this Redis instead of a throwaway server
`

// demoPrefix starts the name of every key the demo writes on a given
// Redis.
const demoPrefix = "dlock-demo:"

// demoWatchdog is the watchdog timeout of the demo's Clients: short, so
// that renewals and expiry happen while you watch.
const demoWatchdog = 1500 * time.Millisecond

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
	d := &demo{out: c.stdout, start: time.Now(), prefix: "demo:", log: c.log().slogger()}
	if eps == nil {
		var closeServer func()
		if eps, closeServer, err = d.throwaway(ctx); err != nil {
			return err
		}
		defer closeServer()
	} else {
		// On a shared server a random part keeps two demos apart.
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		d.prefix = demoPrefix + hex.EncodeToString(b) + ":"
		fmt.Fprintf(d.out, "dlock demo on %s (keys under %q, deleted at the end)\n", eps[0].display, demoPrefix+"*")
	}
	d.rdb = eps[0].open()
	defer d.rdb.Close()
	if err := pingOne(ctx, eps[0], pingTimeout); err != nil {
		return err
	}
	defer d.cleanup()
	fmt.Fprintln(d.out, "Each line: seconds since the start, who, what. Every worker has its own dlock")
	fmt.Fprintln(d.out, "Client, as if it were a separate process.")
	for i, s := range []struct {
		title string
		play  func(context.Context) error
	}{
		{"Three workers, one lock: an unlock wakes a waiter at once (pub/sub, no polling);\n" +
			"   any waiter may win, since a plain lock is not fair (see 3)", d.contention},
		{"The watchdog renews the lease while the holder lives; a crashed holder's lock expires", d.crash},
		{"A fair lock: first come, first served", d.fair},
		{"A read-write lock: readers share it, a writer waits for them", d.readWrite},
	} {
		fmt.Fprintf(d.out, "\n== %d. %s\n", i+1, s.title)
		if err := s.play(ctx); err != nil {
			if ctx.Err() != nil {
				return exitf(exitSignalBase+int(syscall.SIGINT), "demo: interrupted")
			}
			return exitf(exitFailure, "demo: %s: %v", s.title, err)
		}
	}
	fmt.Fprintf(d.out, "\nDone in %.1fs. Next: \"dlock run NAME COMMAND\" runs a command under a lock,\n", time.Since(d.start).Seconds())
	fmt.Fprintln(d.out, `"dlock status NAME" shows who holds it; "dlock help" has the rest.`)
	return nil
}

// throwaway starts the demo's own server and says which in one line: a
// redis-server on a unix socket in a temporary directory (it needs no
// free port), or, when none is on PATH, the embedded server
// (demo_embedded.go), so that the demo needs nothing installed. The
// function it returns stops the server and removes what it made.
func (d *demo) throwaway(ctx context.Context) ([]endpoint, func(), error) {
	srv, err := redisserver.Start(ctx, redisserver.Config{Unix: true, TempPrefix: "dlock-demo-"})
	if errors.Is(err, redisserver.ErrNotFound) {
		emb, err := embeddedServer()
		if err != nil {
			return nil, nil, exitf(exitFailure, "demo: no redis-server on PATH, and %v; give --redis", err)
		}
		fmt.Fprintf(d.out, "dlock demo: no redis-server on PATH, so on an embedded Redis-compatible server (miniredis) on %s\n", emb.Addr())
		opt := &redis.Options{Addr: emb.Addr()}
		open := func() redis.UniversalClient { return redis.NewClient(opt) }
		return []endpoint{{display: "redis://" + emb.Addr(), open: open}}, emb.Close, nil
	}
	if err != nil {
		return nil, nil, exitf(exitFailure, "demo: %v", err)
	}
	fmt.Fprintf(d.out, "dlock demo: a throwaway redis-server on %s (removed at the end)\n", srv.Addr())
	open := func() redis.UniversalClient { return srv.Client() }
	return []endpoint{{display: "unix://" + srv.Addr(), open: open}}, func() { _ = srv.Close() }, nil
}

// demo is one run of the demo: its Redis, its output and the Clients it
// made (closed at the end).
type demo struct {
	rdb     redis.UniversalClient
	out     io.Writer
	start   time.Time
	prefix  string
	log     *slog.Logger // the Clients' logger: the CLI's (log.go)
	mu      sync.Mutex   // serialises output and clients
	clients []*dlock.Client
}

// event prints what who did, after the seconds since the start.
func (d *demo) event(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %5.2fs  %-9s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// client returns a new Client, as if of another process; the demo closes
// it at the end.
func (d *demo) client() (*dlock.Client, error) {
	c, err := dlock.New(d.rdb, dlock.WithWatchdogTimeout(demoWatchdog), dlock.WithLogger(d.log))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c, nil
}

// mutex returns a Mutex on the demo lock name through a new Client.
func (d *demo) mutex(name string) (*dlock.Mutex, error) {
	c, err := d.client()
	if err != nil {
		return nil, err
	}
	return c.NewMutex(d.prefix + name)
}

// cleanup closes the Clients and deletes the demo's keys.
func (d *demo) cleanup() {
	for _, c := range d.clients {
		_ = c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := d.rdb.Scan(ctx, 0, "*"+d.prefix+"*", scanCount).Iterator()
	for iter.Next(ctx) {
		d.rdb.Del(ctx, iter.Val())
	}
}

// waitUntil polls cond every 5 ms, for up to 5 s: the demo waits until
// Redis shows what a worker did before the next one acts, so that the
// timeline reads the same on every run.
func waitUntil(ctx context.Context, what string, cond func() bool) error {
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting until %s", what)
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// waiters waits until n Clients are subscribed to channel (on a cluster,
// sharded pub/sub counted on every master).
func (d *demo) waiters(ctx context.Context, channel string, n int64) error {
	count := func() int64 {
		cc, ok := d.rdb.(*redis.ClusterClient)
		if !ok {
			return d.rdb.PubSubNumSub(ctx, channel).Val()[channel]
		}
		var total int64
		var mu sync.Mutex
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			total += node.PubSubShardNumSub(ctx, channel).Val()[channel]
			return nil
		})
		return total
	}
	return waitUntil(ctx, fmt.Sprintf("%d waiting on %s", n, channel), func() bool { return count() >= n })
}

// pause sleeps for the demo's pacing, or until ctx ends.
func pause(ctx context.Context, dur time.Duration) error {
	select {
	case <-time.After(dur):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
