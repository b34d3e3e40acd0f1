package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// defaultRedisURL is used when neither --redis nor DLOCK_REDIS_URL is set.
	defaultRedisURL = "redis://127.0.0.1:6379"
	// pingTimeout bounds the first contact with each Redis deployment.
	pingTimeout = 5 * time.Second
	// minPingTimeout bounds it for run and hold with -n, or with a
	// --wait shorter than that: a Redis that answers at all answers a
	// PING within it, even over TLS across regions.
	minPingTimeout = time.Second
	// masked replaces passwords in everything dlock prints.
	masked = "xxxxx"
)

// connFlags are the connection flags every command that talks to Redis has.
type connFlags struct {
	urls stringsFlag
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{}
	fs.Var(&f.urls, "redis", "Redis URL (repeat for RedLock)")
	return f
}

// endpoint is one Redis deployment, parsed from a URL but not yet
// contacted.
type endpoint struct {
	display string   // the URL with its passwords masked
	mode    string   // "server", "cluster" or "sentinel"
	secrets []string // passwords, scrubbed from every error message
	db      int      // the database number of a single server
	open    func() redis.UniversalClient
	// openPing opens a client like open's that keeps to its context's
	// deadline (ContextTimeoutEnabled), for the connection check: without
	// it go-redis waits up to its 5s dial timeout for a server that
	// accepts and never answers, whatever the deadline. Nil: open's
	// clients serve.
	openPing func() redis.UniversalClient
}

// endpoints returns the deployments named by --redis, else by
// DLOCK_REDIS_URL, else by REDIS_URL (several URLs separated by spaces),
// else the default.
func (c *cli) endpoints(f *connFlags) ([]endpoint, error) {
	raws := []string(f.urls)
	for _, env := range []string{"DLOCK_REDIS_URL", "REDIS_URL"} {
		if len(raws) == 0 {
			raws = strings.Fields(c.getenv(env))
		}
	}
	if len(raws) == 0 {
		raws = []string{defaultRedisURL}
	}
	eps := make([]endpoint, len(raws))
	for i, raw := range raws {
		ep, err := parseEndpoint(raw)
		if err != nil {
			return nil, err
		}
		eps[i] = ep
		c.log().addSecrets(ep.secrets)
	}
	return eps, nil
}

// parseEndpoint reads one URL: a sentinel URL when it has master_name, a
// cluster URL when it has addr= or cluster=true, else one server. The
// error never contains the password.
func parseEndpoint(raw string) (endpoint, error) {
	if !strings.Contains(raw, "://") {
		// host:port is short for redis://host:port; anything else
		// without a scheme may hold a password, so it is not quoted.
		if strings.ContainsAny(raw, "/@?#") {
			return endpoint{}, usageError("invalid Redis URL: no scheme; start it with redis://, rediss:// or unix://")
		}
		raw = "redis://" + raw
	}
	if err := checkPort(raw); err != nil {
		return endpoint{}, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL, and a password with a reserved
		// character may have been read as a host or port: quote nothing.
		return endpoint{}, usageError("invalid Redis URL: it does not parse as a URL (percent-encode reserved characters such as / # ? @ %% in the user name and password)")
	}
	ep := endpoint{display: maskURL(u), secrets: secrets(u)}
	q := u.Query()
	bad := func(err error) error {
		return usageError("invalid Redis URL %s: %s", ep.display, ep.scrub(err.Error()))
	}
	switch {
	case q.Has("master_name"):
		ep.mode = "sentinel"
		if q.Has("route_by_latency") || q.Has("route_randomly") {
			// go-redis panics on these for a failover client.
			return endpoint{}, usageError("invalid Redis URL %s: route_by_latency and route_randomly need a failover cluster client, which dlock does not use", ep.display)
		}
		opt, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return endpoint{}, bad(err)
		}
		if opt.MasterName == "" {
			return endpoint{}, usageError("invalid Redis URL %s: empty master_name", ep.display)
		}
		ep.open = func() redis.UniversalClient { return redis.NewFailoverClient(opt) }
		ep.openPing = func() redis.UniversalClient {
			o := *opt
			o.ContextTimeoutEnabled = true
			return redis.NewFailoverClient(&o)
		}
	case q.Has("addr") || q.Has("cluster"):
		ep.mode = "cluster"
		if v := q.Get("cluster"); q.Has("cluster") && v != "true" && v != "1" {
			return endpoint{}, usageError("invalid Redis URL %s: cluster=%s; use cluster=true", ep.display, v)
		}
		q.Del("cluster")
		u2 := *u
		u2.RawQuery = q.Encode()
		opt, err := redis.ParseClusterURL(u2.String())
		if err != nil {
			return endpoint{}, bad(err)
		}
		ep.open = func() redis.UniversalClient { return redis.NewClusterClient(opt) }
		ep.openPing = func() redis.UniversalClient {
			o := *opt
			o.ContextTimeoutEnabled = true
			return redis.NewClusterClient(&o)
		}
	default:
		ep.mode = "server"
		opt, err := redis.ParseURL(u.String())
		if err != nil {
			return endpoint{}, bad(err)
		}
		ep.db = opt.DB
		ep.open = func() redis.UniversalClient { return redis.NewClient(opt) }
		ep.openPing = func() redis.UniversalClient {
			o := *opt
			o.ContextTimeoutEnabled = true
			return redis.NewClient(&o)
		}
	}
	return ep, nil
}

// checkPort reports a port that is not a number from 1 to 65535 in a
// server URL. Only a port that cannot hold part of a password is quoted:
// one after the last "@" of an authority that has one, or of a URL that
// has no "@" at all (a password with an unencoded "/", "?" or "#" ends
// the authority early and is left to the generic message).
func checkPort(raw string) error {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok || strings.HasPrefix(raw, "unix:") {
		return nil
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		authority = authority[at+1:]
	} else if strings.Contains(rest, "@") {
		return nil
	}
	if strings.HasPrefix(authority, "[") { // [IPv6]:port
		_, authority, _ = strings.Cut(authority, "]")
	} else if strings.Count(authority, ":") > 1 {
		return nil
	}
	_, port, ok := strings.Cut(authority, ":")
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(port)
	switch {
	case port == "":
		return usageError("invalid Redis URL: empty port after \":\" (write host:6379, or leave out the colon)")
	case err != nil || strings.HasPrefix(port, "+") || strings.HasPrefix(port, "-"):
		return usageError("invalid Redis URL: port %q is not a number", port)
	case n < 1 || n > 65535:
		return usageError("invalid Redis URL: port %d is outside 1..65535", n)
	}
	return nil
}

// maskURL returns u as text with the password in its user info and in a
// password= query parameter (a sentinel URL's master password) masked.
func maskURL(u *url.URL) string {
	m := *u
	if _, ok := m.User.Password(); ok {
		m.User = url.UserPassword(m.User.Username(), masked)
	}
	q := m.Query()
	for _, k := range []string{"password", "sentinel_password"} {
		if q.Has(k) {
			q.Set(k, masked)
		}
	}
	m.RawQuery = q.Encode()
	return m.String()
}

// secrets returns the passwords in u, raw and as written in the URL.
func secrets(u *url.URL) []string {
	var s []string
	add := func(p string) {
		if p != "" {
			s = append(s, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	if p, ok := u.User.Password(); ok {
		add(p)
	}
	for _, k := range []string{"password", "sentinel_password"} {
		add(u.Query().Get(k))
	}
	return s
}

// scrub masks the endpoint's passwords in msg.
func (ep endpoint) scrub(msg string) string {
	for _, s := range ep.secrets {
		msg = strings.ReplaceAll(msg, s, masked)
	}
	return msg
}

// pingOne checks that ep answers and accepts the credentials, so that a
// wrong address or password is reported before anything else happens.
// timeout (or ctx's deadline, if sooner) bounds the wait for the answer:
// the PING goes through a client of its own, opened by ep.openPing and
// closed before pingOne returns.
func pingOne(ctx context.Context, ep endpoint, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	open := ep.openPing
	if open == nil { // the demo's own redis-server
		open = ep.open
	}
	rdb := open()
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return ep.connError(err, timeout)
	}
	return nil
}

// connError classifies a failed first contact, which had timeout to
// answer: refused credentials (exit 5) or anything else that kept dlock
// from talking to Redis (exit 4).
func (ep endpoint) connError(err error, timeout time.Duration) error {
	msg := strings.TrimSpace(ep.scrub(err.Error()))
	switch {
	case redis.IsAuthError(err) || redis.IsPermissionError(err):
		return exitf(exitAuth, "Redis at %s refused the credentials: %s", ep.display, msg)
	case strings.Contains(msg, "DB index is out of range"):
		// SELECT failed: the server answers but has fewer databases.
		return usageError("Redis at %s has no database %d (the server's \"databases\" setting is lower; it said: %s)", ep.display, ep.db, msg)
	case errors.Is(err, context.DeadlineExceeded) && ep.mode == "sentinel":
		return exitf(exitUnreachable, "cannot reach Redis at %s: no answer from the sentinels or the master within %v", ep.display, timeout)
	case errors.Is(err, context.DeadlineExceeded):
		return exitf(exitUnreachable, "cannot reach Redis at %s: no answer within %v (a TLS server needs rediss://, a plain one redis://)", ep.display, timeout)
	case errors.Is(err, context.Canceled):
		return exitf(exitFailure, "connecting to Redis at %s: interrupted", ep.display)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return exitf(exitUnreachable, "cannot reach Redis at %s: %s", ep.display, msg)
	}
	return exitf(exitUnreachable, "cannot talk to Redis at %s: %s", ep.display, msg)
}

// redisError reports a failed Redis command after the first contact: a
// missing ACL permission (exit 5), a lost connection (exit 4) or another
// error (exit 1).
func redisError(what string, err error) error {
	msg := trimPrefix(err)
	var ne net.Error
	switch {
	case redis.IsAuthError(err) || redis.IsPermissionError(err):
		return exitf(exitAuth, "%s: %s", what, msg)
	case errors.As(err, &ne):
		return exitf(exitUnreachable, "%s: %s", what, msg)
	}
	return exitf(exitFailure, "%s: %s", what, msg)
}
