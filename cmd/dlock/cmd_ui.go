package main

// dlock ui: an operator's web console, a thin view over what list,
// status, leader and deadlocks read. One sampler (ui_sampler.go) scans
// Redis once per interval for every viewer; the page (ui/) gets each
// sample by server-sent events (ui_http.go), with charts and the
// deadlock graph drawn as SVG on the server (ui_svg.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

var uiUsage = `Usage: dlock ui [--listen ADDR] [--allow-host NAME]... [--allow-writes]
               [--interval D] [flags]

Serves an operator's web console for one Redis deployment: the locks held
(kind, holder program/host/pid, held for, TTL, re-entries, fencing token),
fair queues and waiters, read-write holders, permit semaphores, elections
and deadlock cycles (drawn as a graph), with charts of acquisitions per
second and wait-time percentiles over the last 15 minutes, per name
prefix. The page updates itself (server-sent events) after every sample.

One sampler scans Redis once per --interval with SCAN (COUNT 1000, never
KEYS), whatever the number of viewers; GET /api/state returns the sample
as JSON (the fields of dlock list --json). The page and the API never show
a password: the Redis URL is shown masked.

Safe by default: it listens on loopback only, and is read-only. It
answers only requests whose Host is an IP address, localhost, a name
given with --allow-host or, listening beyond loopback, the machine's
hostname; any other Host (a DNS rebinding page's) gets 403. With
--allow-writes, POST /api/locks/NAME/unlock (dlock unlock --force) and
POST /api/queues/NAME/clear (dlock clear-queue) work, for requests that
carry the token printed at start in the header X-Dlock-Token and come
from the page itself (no cross-site requests); any other write is refused
with 403 and changes nothing.

Flags:
  --listen ADDR      the address to serve on (default 127.0.0.1:7070); a
                     non-loopback address shows lock names to the network
  --allow-host NAME  also answer requests for Host NAME, a DNS name the
                     console is reached by (repeatable)
  --allow-writes     allow force-unlock and clear-queue, with the token
  --interval D       time between samples (default 1s, at least 100ms)
  --redis URL        the Redis deployment

` + seeHelp

// defaultUIListen is where dlock ui serves unless --listen says otherwise:
// loopback only.
const defaultUIListen = "127.0.0.1:7070"

// uiArgs is a parsed dlock ui command line.
type uiArgs struct {
	eps      []endpoint
	listen   string
	hosts    stringsFlag // --allow-host
	writes   bool
	interval time.Duration
}

// parseUI reads the command line of dlock ui without acting on it.
func (c *cli) parseUI(args []string) (uiArgs, error) {
	fs := newFlagSet("ui")
	conn := addConnFlags(fs)
	a := uiArgs{}
	fs.StringVar(&a.listen, "listen", defaultUIListen, "")
	fs.Var(&a.hosts, "allow-host", "")
	fs.BoolVar(&a.writes, "allow-writes", false, "")
	fs.Var(newDurationFlag(&a.interval, time.Second), "interval", "")
	pos, err := c.parse(fs, uiUsage, args)
	switch {
	case err != nil:
		return a, err
	case len(pos) != 0:
		return a, usageError("ui: no arguments expected, got %q; usage: dlock ui [--listen ADDR] [--allow-writes]", pos[0])
	case a.interval < 100*time.Millisecond:
		return a, usageError("ui: --interval %v is below 100ms", a.interval)
	}
	if a.eps, err = c.endpoints(conn); err == nil && len(a.eps) > 1 {
		err = usageError("ui: one --redis deployment expected, got %d", len(a.eps))
	}
	return a, err
}

func (c *cli) uiCmd(ctx context.Context, args []string) error {
	a, err := c.parseUI(args)
	if err != nil {
		return err
	}
	s, err := openReached(ctx, c.log(), a.eps)
	if err != nil {
		return err
	}
	defer s.close()
	ln, err := net.Listen("tcp", a.listen)
	if err != nil {
		return exitf(exitFailure, "ui: %v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	u := newUIServer(s, a.writes, newUIToken())
	u.hosts = uiHosts(ln.Addr(), a.hosts)
	c.uiBanner(ln.Addr(), u)
	return u.serve(ctx, ln, a.interval)
}

// uiHosts are the names, besides IP addresses and localhost, that a
// request's Host may carry: those given with --allow-host and, when the
// console listens beyond loopback, the machine's hostname, in full and
// up to its first dot.
func uiHosts(addr net.Addr, allow []string) []string {
	hosts := slices.Clone(allow)
	if name, err := os.Hostname(); err == nil && !isLoopback(addr) {
		short, _, _ := strings.Cut(name, ".")
		hosts = append(hosts, name, short)
	}
	for i, h := range hosts {
		hosts[i] = normalHost(h)
	}
	return hosts
}

// newUIToken returns a fresh write token: 128 random bits in hex.
func newUIToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// uiBanner prints where the console is and, with writes allowed, the
// token; a warning too when the address is not loopback.
func (c *cli) uiBanner(addr net.Addr, u *uiServer) {
	fmt.Fprintf(c.stdout, "dlock ui: serving %s on http://%s/ (Ctrl-C stops)\n", u.s.eps[0].display, addr)
	if u.writes {
		fmt.Fprintf(c.stdout, "dlock ui: writes allowed; token: %s (the page asks for it; scripts send it as X-Dlock-Token)\n", u.token)
	} else {
		fmt.Fprintln(c.stdout, "dlock ui: read-only (--allow-writes enables force-unlock and clear-queue)")
	}
	if !isLoopback(addr) {
		fmt.Fprintf(c.stderr, "dlock: ui: listening on %s, not loopback: whoever reaches it sees lock names and holders\n", addr)
	}
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// serve runs the sampler and the HTTP server on ln until ctx ends, then
// stops both and returns.
func (u *uiServer) serve(ctx context.Context, ln net.Listener, interval time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { u.sample(ctx, interval) })
	srv := &http.Server{
		Handler:           u.routes(),
		ReadHeaderTimeout: 5 * time.Second,
		// Requests end with ctx: the event streams too, so Shutdown
		// does not wait for them.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	wg.Go(func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
	err := srv.Serve(ln)
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return exitf(exitFailure, "ui: %v", err)
}
