package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// cliLog is where the library's Clients and go-redis log while dlock
// runs: one line on stderr per record, in dlock's own format ("dlock:
// MESSAGE: ERROR"), with passwords masked. Warnings and errors are shown;
// debug and info records (go-redis's own messages, such as its connection
// pool's dial failures, and the library's notes) only with -v. The library's
// "lock lost" record is dropped, since run and hold report a lost lock
// themselves, and so is every record after that report: a renewal that
// fails once the lock is gone is not news.
type cliLog struct {
	mu      sync.Mutex // serialises writes to w
	w       io.Writer
	level   slog.LevelVar // slog.LevelWarn; slog.LevelDebug with -v
	lost    atomic.Bool   // the CLI reported a lost lock
	secrets atomic.Pointer[[]string]
}

// newCLILog returns a cliLog writing to w at level Warn.
func newCLILog(w io.Writer) *cliLog {
	l := &cliLog{w: w}
	l.level.Set(slog.LevelWarn)
	return l
}

// log returns the cli's log, creating it on first use.
func (c *cli) log() *cliLog {
	c.logOnce.Do(func() { c.logs = newCLILog(c.stderr) })
	return c.logs
}

// verbose shows debug and info records from now on.
func (l *cliLog) verbose() { l.level.Set(slog.LevelDebug) }

// reportedLoss drops every record from now on: the CLI has said that the
// lock is lost, and the library's later words on it (a renewal that failed,
// a release that found nothing) would repeat it.
func (l *cliLog) reportedLoss() { l.lost.Store(true) }

// addSecrets masks ss in every line from now on.
func (l *cliLog) addSecrets(ss []string) {
	for {
		old := l.secrets.Load()
		var next []string
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, ss...)
		if l.secrets.CompareAndSwap(old, &next) {
			return
		}
	}
}

// slogger is the logger for the library's Clients (dlock.WithLogger).
func (l *cliLog) slogger() *slog.Logger { return slog.New(&cliHandler{log: l}) }

// line writes one line, "dlock: " and text, unless the lock was reported
// lost.
func (l *cliLog) line(text string) {
	if l.lost.Load() {
		return
	}
	if p := l.secrets.Load(); p != nil {
		for _, s := range *p {
			if s != "" {
				text = strings.ReplaceAll(text, s, masked)
			}
		}
	}
	text = strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "dlock: %s\n", text)
}

// lockLostMessage is the message of the library's record of a lost lock
// (hold.go), which the CLI reports in its own words.
const lockLostMessage = "dlock: lock lost"

// cliHandler is the slog.Handler behind cliLog.slogger.
type cliHandler struct {
	log   *cliLog
	attrs []slog.Attr
}

func (h *cliHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.log.level.Level()
}

// Handle writes "dlock: [debug: ]MESSAGE (lock "NAME"): ERROR key=value".
func (h *cliHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == lockLostMessage {
		return nil
	}
	var b strings.Builder
	if r.Level < slog.LevelWarn {
		b.WriteString("debug: ")
	}
	b.WriteString(strings.TrimPrefix(r.Message, "dlock: "))
	var errText string
	var rest []string
	add := func(a slog.Attr) bool {
		switch a.Key {
		case "error":
			errText = strings.TrimPrefix(a.Value.String(), "dlock: ")
		case "lock", "semaphore", "channel":
			fmt.Fprintf(&b, " (%s %q)", a.Key, a.Value.String())
		default:
			rest = append(rest, a.Key+"="+a.Value.String())
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if errText != "" {
		b.WriteString(": " + errText)
	}
	if len(rest) > 0 {
		b.WriteString(" [" + strings.Join(rest, " ") + "]")
	}
	h.log.line(b.String())
	return nil
}

func (h *cliHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &cliHandler{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

// WithGroup keeps the attributes flat: the CLI's lines have no groups.
func (h *cliHandler) WithGroup(string) slog.Handler { return h }

// redisLog passes go-redis's own log lines (redis.SetLogger) to a cliLog
// at debug level: "dlock: debug: redis: connection pool: failed to dial
// ...". go-redis has one logger per process, so the last cli to start
// owns it.
type redisLog struct{ log *cliLog }

func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	if r.log.level.Level() > slog.LevelDebug {
		return
	}
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	r.log.line("debug: redis: " + msg)
}

// routeRedisLog sends go-redis's log lines to l.
func routeRedisLog(l *cliLog) { redis.SetLogger(redisLog{l}) }
