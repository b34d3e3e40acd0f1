package dlock

// The local deadlines of a Client's holds are kept in one queue swept by
// one timer (expiry.go): these tests let many holds run past their
// deadline at once and check that they end without a goroutine each, and
// that a renewal that came in time keeps a hold the queue had due.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// TestOverdueHoldsEndWithoutAGoroutineEach: holds whose local deadlines
// pass while the registry is busy (its mutex held, as when renewals fall
// behind and the watchdog and the acquirers contend for it) are ended by
// one sweep, not by a goroutine per hold piling up on the mutex; once the
// mutex is free every one of them is lost with ErrLockLost.
func TestOverdueHoldsEndWithoutAGoroutineEach(t *testing.T) {
	const (
		n     = 300
		lease = 5 * time.Second // long enough to take every lock first
	)
	ctx := boundedCtx(t, 2*time.Minute)
	c := newClient(t, nil)
	name := lockName(t)
	lockCtxs := make([]context.Context, n)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				l, err := mustMutex(t, c, fmt.Sprintf("%s:%d", name, i), WithLease(lease)).Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				lockCtxs[i] = l
			}
		})
	}
	awaitGroup(t, &wg, time.Minute, "taking the locks")
	if t.Failed() {
		return
	}
	before := runtime.NumGoroutine()

	c.holds.mu.Lock()
	if len(c.holds.holds) != n {
		c.holds.mu.Unlock()
		t.Fatalf("%d holds registered, want %d: taking the locks took longer than their lease", len(c.holds.holds), n)
	}
	var last time.Time
	for _, hd := range c.holds.holds {
		if u := hd.until.get().time(); u.After(last) {
			last = u
		}
	}
	time.Sleep(time.Until(last) + 500*time.Millisecond) // every deadline passes with the mutex held
	during := runtime.NumGoroutine()
	c.holds.mu.Unlock()

	if during-before > n/10 {
		t.Errorf("%d goroutines while %d holds were overdue, %d before: a goroutine per hold", during, n, before)
	}
	for i, l := range lockCtxs {
		awaitDone(t, l, 10*time.Second, fmt.Sprintf("lock context %d after its deadline", i))
		if err := context.Cause(l); !errors.Is(err, ErrLockLost) {
			t.Fatalf("lock context %d ended with %v, want ErrLockLost", i, err)
		}
	}
	if n := c.watchdog.Len(); n != 0 {
		t.Errorf("the watchdog still keeps %d holds after they were lost", n)
	}
}

// slowRenewals makes Redis renew one chunk at a time, in the order they
// come, delay each, as a busy server would: a watchdog with more holds
// than that renews in an interval. A renewal whose ctx ended while it
// waited its turn is not sent, as one waiting for a pooled connection.
type slowRenewals struct {
	turn  chan struct{} // capacity 1; blocked senders are served in order
	delay time.Duration
}

// isRenewal reports whether cmd runs the renewal script by its hash
// (the test loads it first; an EVAL after a NOSCRIPT goes through).
func isRenewal(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && args[1] == scripts.LockRenew.Hash()
}

func (h *slowRenewals) slow(ctx context.Context, cmds ...redis.Cmder) error {
	n := 0 // renewals in cmds
	for _, cmd := range cmds {
		if isRenewal(cmd) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(time.Duration(n) * h.delay) // the renewals' cost in Redis, not synchronisation
	<-h.turn
	return nil
}

func (h *slowRenewals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.slow(ctx, cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *slowRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.slow(ctx, cmds...); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// TestRenewalsPastCapacity: a Client holds more locks than Redis renews
// within an interval (30 holds renewed one at a time, 20 ms each; an
// interval of 300 ms renews 15, a lease about 44). Each tick that falls
// behind is reported (RenewalLag, and a warning in the log); the next
// tick goes on with the holds renewed longest ago, so that the holds are
// renewed in turn within their lease; a hold is lost only when its own
// local deadline passed (LostExpired; never found gone from Redis, which
// would mean the lease ran out there first, a hiccup of a loaded machine
// may cost some); and the holds that remain keep being renewed, past
// several more leases.
func TestRenewalsPastCapacity(t *testing.T) {
	const (
		n       = 30
		timeout = 900 * time.Millisecond // renewed every 300 ms
	)
	ctx := boundedCtx(t, 3*time.Minute)
	// ContextTimeoutEnabled: the transport sends each renewal (its ctx
	// has the tick's deadline) alone, through ProcessHook.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.ScriptLoad(ctx, scripts.Source(scripts.LockRenew)).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&slowRenewals{turn: make(chan struct{}, 1), delay: 20 * time.Millisecond})
	var (
		mu       sync.Mutex
		lags     []RenewalLagInfo
		causes   = map[LostCause]int{}
		lastLost = time.Now() // or the start
		logged   bytes.Buffer
	)
	obs := Observer{
		RenewalLag: func(r RenewalLagInfo) {
			mu.Lock()
			defer mu.Unlock()
			lags = append(lags, r)
		},
		Lost: func(_ LockInfo, e LostInfo) {
			mu.Lock()
			defer mu.Unlock()
			causes[e.Cause]++
			lastLost = time.Now()
		},
	}
	logger := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logged}, nil))
	c := newClient(t, rdb, WithWatchdogTimeout(timeout), WithRenewalBatchSize(1), WithObserver(obs), WithLogger(logger))
	name := lockName(t)
	lockCtxs := make([]context.Context, n)
	for i := range n {
		l, err := mustMutex(t, c, fmt.Sprintf("%s:%d", name, i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lockCtxs[i] = l
	}

	// Until no hold was lost for three timeouts: what remains is kept.
	eventually(t, time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(lastLost) < 3*timeout {
			return fmt.Errorf("holds still being lost (%v)", causes)
		}
		return nil
	})
	var kept []int
	for i, l := range lockCtxs {
		if l.Err() == nil {
			kept = append(kept, i)
		}
	}
	if len(kept) == 0 {
		t.Fatal("every hold lost: none kept being renewed past capacity")
	}
	select { // the holds left are renewed on, past three more timeouts
	case <-time.After(3 * timeout):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	still := 0 // a hiccup of a loaded machine may cost one more
	for _, i := range kept {
		if lockCtxs[i].Err() == nil {
			still++
		}
	}
	if still == 0 {
		t.Errorf("none of the %d holds kept past capacity still held three timeouts later", len(kept))
	}

	mu.Lock()
	defer mu.Unlock()
	if causes[LostRejected] > 0 || causes[LostExpired] != n-still {
		t.Errorf("holds lost by cause %v, %d kept of %d: want every loss by its local deadline", causes, still, n)
	}
	if len(lags) == 0 {
		t.Fatal("no RenewalLag while renewals fell behind")
	}
	if l := lags[0]; l.Left <= 0 || l.Holds > n || l.Oldest <= 0 || l.Interval != timeout/3 {
		t.Errorf("first RenewalLag %+v", l)
	}
	if !strings.Contains(logged.String(), "renewals are falling behind") {
		t.Errorf("no warning logged about the lag; log:\n%.2000s", logged.String())
	}
	t.Logf("%d of %d holds kept (%d three timeouts later); %d lag reports; lost %v", len(kept), n, still, len(lags), causes)
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
