// Command fencing runs the founding articles' three experiments with a
// Redis lock, on a throwaway redis-server and PostgreSQL it starts and
// removes itself: a lock never released, a lease shorter than the work,
// and the watchdog, whose last act freezes a holder past its lease and
// shows PostgreSQL refusing its stale fencing token (dlock.CheckToken).
// Without PostgreSQL installed (Debian: apt-get install postgresql), or
// with -redis-only, the data lives in Redis behind dlock.FencedSet.
//
//	go run ./fencetest/cmd/fencing       # from the repository root
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/fencetest"
	"github.com/dlock-go/dlock/internal/redistest"
)

func main() {
	redisOnly := flag.Bool("redis-only", false, "keep the data in Redis (dlock.FencedSet), not PostgreSQL")
	watchdog := flag.Duration("watchdog", time.Second, "the watchdog's lease; the demo takes about 10 of them")
	flag.Parse()
	if err := run(*redisOnly, *watchdog); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

func run(redisOnly bool, watchdog time.Duration) error {
	// Ctrl-C or SIGTERM cancels the demo, and the deferred Closes remove
	// the servers (a SIGKILL leaves that to fencetest's parent-death signal).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := redistest.StartServer()
	if err != nil {
		return err
	}
	defer srv.Close()
	var db *sql.DB
	if !redisOnly {
		pg, err := fencetest.StartPostgres(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencing: no PostgreSQL (%v); the data goes to Redis\n", err)
		} else {
			defer pg.Close()
			if db, err = pg.Open(); err != nil {
				return err
			}
			defer db.Close()
		}
	}
	return fencetest.RunDemo(ctx, fencetest.DemoConfig{RedisAddr: srv.Addr(), DB: db, Watchdog: watchdog, Out: os.Stdout})
}
