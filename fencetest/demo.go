package fencetest

// This file is the founding articles' three experiments with a Redis lock
// as one demo (cmd/fencing runs it): a lock taken and never released, a
// lease shorter than the work, and the watchdog, whose last act shows the
// limit of every lease lock (a holder frozen past its lease) and the
// remedy: the storage refuses the stale holder's fencing token.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// DemoConfig is what RunDemo works with.
type DemoConfig struct {
	RedisAddr string // the lock's Redis
	// DB is the PostgreSQL the acts write to; nil writes to Redis
	// instead, through dlock.FencedSet.
	DB *sql.DB
	// Watchdog is the lease of watchdog-renewed locks (default 1 s);
	// every wait in the demo is a multiple of it.
	Watchdog time.Duration
	Out      io.Writer
}

// store is where the acts write: PostgreSQL or Redis, unfenced or fenced.
type store interface {
	name() string
	write(ctx context.Context, v string) error                      // no check
	fencedWrite(ctx context.Context, f dlock.Fence, v string) error // ErrStaleToken when stale
	read(ctx context.Context) (string, error)
	close()
}

// RunDemo runs the three acts and reports them on cfg.Out. It fails if
// an act does not show what it is about.
func RunDemo(ctx context.Context, cfg DemoConfig) error {
	if cfg.Watchdog == 0 {
		cfg.Watchdog = time.Second
	}
	d := &demo{cfg: cfg, start: time.Now()}
	var err error
	if cfg.DB != nil {
		d.st, err = newSQLStore(ctx, cfg.DB)
	} else {
		d.st, err = newRedisStore(cfg.RedisAddr), nil
	}
	if err != nil {
		return err
	}
	defer d.st.close()
	d.say("", "the protected data lives in %s", d.st.name())
	for i, act := range []func(context.Context) error{d.noRelease, d.shortLease, d.watchdog} {
		if err := act(ctx); err != nil {
			return fmt.Errorf("act %d: %w", i+1, err)
		}
	}
	return nil
}

type demo struct {
	cfg   DemoConfig
	st    store
	start time.Time
	mu    sync.Mutex
}

func (d *demo) say(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if who == "" {
		fmt.Fprintf(d.cfg.Out, "%6.2fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(d.cfg.Out, "%6.2fs  %-8s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// process is one client process of the demo: its own go-redis client and
// dlock Client. freeze stops all its Redis traffic, as a GC pause, a
// SIGSTOP or a partition would, until thaw.
type process struct {
	rdb    *redis.Client
	locks  *dlock.Client
	mu     sync.Mutex
	frozen chan struct{} // non-nil while frozen; thaw closes it
	closed sync.Once
}

func (d *demo) process() (*process, error) {
	p := &process{rdb: redis.NewClient(&redis.Options{Addr: d.cfg.RedisAddr})}
	p.rdb.AddHook(freezeHook{p})
	// dlock's warnings (lock lost, renewal failed) would repeat what the
	// demo says.
	quiet := dlock.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	locks, err := dlock.New(p.rdb, dlock.WithWatchdogTimeout(d.cfg.Watchdog), quiet)
	if err != nil {
		p.rdb.Close()
		return nil, err
	}
	p.locks = locks
	return p, nil
}

// close ends the process: its locks are not released, they expire.
func (p *process) close() {
	p.closed.Do(func() {
		p.thaw()
		p.locks.Close()
		p.rdb.Close()
	})
}

func (p *process) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *process) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// wait blocks while p is frozen.
func (p *process) wait(ctx context.Context) error {
	p.mu.Lock()
	f := p.frozen
	p.mu.Unlock()
	if f == nil {
		return nil
	}
	select {
	case <-f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// freezeHook holds every command of a frozen process back until it thaws.
type freezeHook struct{ p *process }

func (freezeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h freezeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.p.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h freezeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.p.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// noRelease is experiment 1: a lock taken without a lease and never
// released is renewed by the watchdog for as long as its process lives;
// nobody else gets it until the process ends.
func (d *demo) noRelease(ctx context.Context) error {
	d.say("", "— act 1: a lock taken without a lease and never released")
	a, err := d.process()
	if err != nil {
		return err
	}
	defer a.close()
	b, err := d.process()
	if err != nil {
		return err
	}
	defer b.close()
	ma, _ := a.locks.NewMutex("demo:act1")
	mb, _ := b.locks.NewMutex("demo:act1")
	if _, err := ma.Lock(ctx); err != nil {
		return err
	}
	d.say("A", "locked demo:act1 (lease %v, renewed by the watchdog); A forgets to Unlock", d.cfg.Watchdog)
	for range 3 {
		time.Sleep(d.cfg.Watchdog)
		if _, err := mb.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			return fmt.Errorf("TryLock by B while A's watchdog renews: %v, want ErrNotObtained", err)
		}
		d.say("B", "TryLock: still held (A's watchdog keeps renewing it)")
	}
	a.close()
	d.say("A", "process exits: its watchdog stops")
	wctx, cancel := context.WithTimeout(ctx, 3*d.cfg.Watchdog)
	defer cancel()
	lb, err := mb.Lock(wctx)
	if err != nil {
		return fmt.Errorf("lock by B after A exited: %w", err)
	}
	d.say("B", "locked it once A's last lease ran out: release your locks (defer Unlock)")
	return mb.Unlock(lb)
}

// shortLease is experiment 2: a lease shorter than the work. The lock
// expires while A still works; B takes it and writes; A, unaware, writes
// after B: two writers, and the older one wins.
func (d *demo) shortLease(ctx context.Context) error {
	d.say("", "— act 2: a lease shorter than the work, no fencing")
	a, b, err := d.pair()
	if err != nil {
		return err
	}
	defer a.close()
	defer b.close()
	lease := d.cfg.Watchdog / 2
	ma, _ := a.locks.NewMutex("demo:act2", dlock.WithLease(lease))
	mb, _ := b.locks.NewMutex("demo:act2")
	la, err := ma.Lock(ctx)
	if err != nil {
		return err
	}
	d.say("A", "locked demo:act2 with a %v lease; its work takes %v", lease, 3*lease)
	lb, err := mb.Lock(ctx) // waits for A's lease to run out
	if err != nil {
		return err
	}
	d.say("B", "locked it: A's lease ran out while A works")
	if err := d.st.write(ctx, "B's report"); err != nil {
		return err
	}
	d.say("B", "wrote %q", "B's report")
	_ = mb.Unlock(lb)
	time.Sleep(2 * lease)
	if err := d.st.write(ctx, "A's report"); err != nil {
		return err
	}
	d.say("A", "done working, wrote %q (its lock context had ended: %v)", "A's report", context.Cause(la))
	v, err := d.st.read(ctx)
	if err != nil {
		return err
	}
	if v != "A's report" {
		return fmt.Errorf("the data holds %q, want A's stale report", v)
	}
	d.say("", "the data holds %q: two writers, and the stale one won", v)
	return nil
}

// watchdog is experiment 3: without a lease the watchdog renews the lock
// through long work. But a holder frozen longer than the lease (a GC
// pause, SIGSTOP, a partition) loses it without running a line of code;
// only the storage, checking the fencing token, keeps its late write out.
func (d *demo) watchdog(ctx context.Context) error {
	d.say("", "— act 3: the watchdog, fencing tokens and the storage check")
	a, b, err := d.pair()
	if err != nil {
		return err
	}
	defer a.close()
	defer b.close()
	ma, _ := a.locks.NewMutex("demo:act3", dlock.WithFencing())
	mb, _ := b.locks.NewMutex("demo:act3", dlock.WithFencing())
	la, err := ma.Lock(ctx)
	if err != nil {
		return err
	}
	fa := dlock.FenceOf(la)
	d.say("A", "locked demo:act3, fencing token %d; works %v, renewed every %v", fa.Token, 2*d.cfg.Watchdog, (d.cfg.Watchdog / 3).Round(time.Millisecond))
	time.Sleep(2 * d.cfg.Watchdog)
	if _, err := mb.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		return fmt.Errorf("TryLock by B while A works: %v, want ErrNotObtained", err)
	}
	d.say("B", "TryLock: still held, the watchdog did its job")
	a.freeze()
	d.say("A", "frozen (a GC pause, SIGSTOP or a partition): its renewals stop")
	lb, err := mb.Lock(ctx)
	if err != nil {
		return err
	}
	fb := dlock.FenceOf(lb)
	d.say("B", "locked it once A's lease ran out, token %d", fb.Token)
	if err := d.st.fencedWrite(ctx, fb, "B's report"); err != nil {
		return fmt.Errorf("fenced write by B: %w", err)
	}
	d.say("B", "wrote %q with token %d", "B's report", fb.Token)
	_ = mb.Unlock(lb)
	a.thaw()
	err = d.st.fencedWrite(ctx, fa, "A's report")
	if !errors.Is(err, dlock.ErrStaleToken) {
		return fmt.Errorf("stale write by A: %v, want ErrStaleToken", err)
	}
	d.say("A", "thawed, writes %q with token %d: refused by %s (%v)", "A's report", fa.Token, d.st.name(), err)
	v, err := d.st.read(ctx)
	if err != nil {
		return err
	}
	d.say("", "the data holds %q: the stale holder could not write", v)
	return nil
}

// pair returns two client processes.
func (d *demo) pair() (*process, *process, error) {
	a, err := d.process()
	if err != nil {
		return nil, nil, err
	}
	b, err := d.process()
	if err != nil {
		a.close()
		return nil, nil, err
	}
	return a, b, nil
}

// sqlStore keeps the report in PostgreSQL, checked with dlock.CheckToken.
type sqlStore struct{ db *sql.DB }

func newSQLStore(ctx context.Context, db *sql.DB) (*sqlStore, error) {
	if err := (dlock.SQLFence{}).Create(ctx, db); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS demo_report (id int PRIMARY KEY, v text)"); err != nil {
		return nil, err
	}
	return &sqlStore{db}, nil
}

func (s *sqlStore) name() string { return "PostgreSQL (dlock.CheckToken)" }

func (s *sqlStore) close() {}

func (s *sqlStore) write(ctx context.Context, v string) error { return s.tx(ctx, dlock.Fence{}, v) }

func (s *sqlStore) fencedWrite(ctx context.Context, f dlock.Fence, v string) error {
	return s.tx(ctx, f, v)
}

// tx writes v in a transaction, checking f first unless it is the zero
// Fence.
func (s *sqlStore) tx(ctx context.Context, f dlock.Fence, v string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if f != (dlock.Fence{}) {
		if err := dlock.CheckToken(ctx, tx, "demo_report", f); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO demo_report VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", v); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *sqlStore) read(ctx context.Context) (string, error) {
	var v string
	err := s.db.QueryRowContext(ctx, "SELECT v FROM demo_report WHERE id = 1").Scan(&v)
	return v, err
}

// redisStore keeps the report in Redis, checked with dlock.FencedSet.
type redisStore struct{ rdb *redis.Client }

func newRedisStore(addr string) *redisStore {
	return &redisStore{redis.NewClient(&redis.Options{Addr: addr})}
}

const demoKey = "demo:report"

func (s *redisStore) name() string { return "Redis (dlock.FencedSet)" }

func (s *redisStore) close() { s.rdb.Close() }

func (s *redisStore) write(ctx context.Context, v string) error {
	return s.rdb.Set(ctx, demoKey, v, 0).Err()
}

func (s *redisStore) fencedWrite(ctx context.Context, f dlock.Fence, v string) error {
	return dlock.FencedSet(ctx, s.rdb, f, demoKey, v, 0)
}

func (s *redisStore) read(ctx context.Context) (string, error) {
	return s.rdb.Get(ctx, demoKey).Result()
}
