package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// Attempts whose ctx can end, on a go-redis client that ignores ctx (its
// default): the caller runs the attempt and waits for its script in the
// batcher itself (internal/transport/leave.go), instead of handing the
// attempt to another goroutine (sendAside).

// leaveFixture is a Client on a go-redis client with default options that
// reaches Redis through a proxy, with the Mutex scripts cached so that no
// NOSCRIPT round trip comes in between.
func leaveFixture(t *testing.T) (*Client, *redistest.Proxy, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	proxy := redistest.NewTestProxy(t, redisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := newRedis(t)
	for _, s := range []*redis.Script{scripts.LockAcquire, scripts.LockRelease} {
		if err := s.Load(ctx, admin).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, rdb)
	settleRecord(t, c) // the replies held or lost must be the scripts'
	// go-redis sends pipelines on a pool of their own: connect both now.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	return c, proxy, admin
}

// TestLockLeavesItsScriptOnTheWire: a Lock whose ctx can end waits for
// its script in the batcher's queue itself; when its ctx ends while the
// script is on the wire it returns at once, before the script has even
// run, and what the script took is given back only once its reply is in:
// a release sent at once would run before the script.
func TestLockLeavesItsScriptOnTheWire(t *testing.T) {
	ctx := context.Background()
	c, proxy, admin := leaveFixture(t)
	m := mustMutex(t, c, lockName(t))
	tr := c.tr
	tr.FillWire()
	defer tr.ClearWire()

	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	locked := make(chan error, 1)
	go func() {
		_, err := m.Lock(lctx)
		locked <- err
	}()
	eventually(t, 5*time.Second, func() error {
		if n := tr.LeavingQueued(); n != 1 {
			return fmt.Errorf("%d scripts wait in the batcher for their callers, want the Lock's (the attempt was handed to another goroutine?)", n)
		}
		return nil
	})

	// The script goes out when the batch "on the wire" returns; the proxy
	// holds it for a while, and what is sent after it goes straight on.
	proxy.SetLatency(3 * time.Second)
	tr.PassOn()
	eventually(t, 5*time.Second, func() error {
		if proxy.Delayed() == 0 {
			return errors.New("the Lock's script is not on its way")
		}
		return nil
	})
	// Room on the wire again, and no latency: a release would go out at
	// once, alone, on another connection, and run before the script.
	tr.UnfillWire()
	proxy.SetLatency(0)
	cancel()
	err := recv(t, locked, 2*time.Second, "Lock whose ctx ended while its script was on the wire")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
		t.Errorf("Lock: %v, want ErrNotObtained and context.Canceled", err)
	}
	if n, err := admin.Exists(ctx, m.Name()).Result(); n != 0 || err != nil {
		t.Fatalf("the lock is there (%d, %v) before the held script ran: the test lost its timing", n, err)
	}
	eventually(t, 10*time.Second, func() error {
		if proxy.Delayed() != 0 {
			return errors.New("the script is still held")
		}
		return nil
	})
	eventually(t, 10*time.Second, func() error {
		if n, err := admin.Exists(ctx, m.Name()).Result(); n != 0 || err != nil {
			return fmt.Errorf("the lock the left script took is still there (%d, %v)", n, err)
		}
		return nil
	})
	eventually(t, 5*time.Second, func() error {
		if n := onWireNow(c); n != 0 {
			return fmt.Errorf("%d batches still counted on the wire", n)
		}
		return nil
	})
	l := mustLock(t, boundedCtx(t, 10*time.Second), m)
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestLeavingLockSurvivesLostReply: the script of a Lock whose ctx can
// end, sent alone or in a batch for its caller, is sent again by go-redis
// when its reply is lost, and the repeat is counted: each acquisition
// takes one fencing token and the owner's field stays 1.
func TestLeavingLockSurvivesLostReply(t *testing.T) {
	ctx := context.Background()
	c, proxy, admin := leaveFixture(t)
	const n = 3
	ms := make([]*Mutex, n)
	for i := range ms {
		ms[i] = mustMutex(t, c, fmt.Sprintf("%s-%d", lockName(t), i), WithFencing())
		counterAboveClock(t, admin, ms[i].Name())
	}
	check := func(i int, l context.Context) {
		t.Helper()
		tok, _ := Token(l)
		got, err := admin.Get(ctx, prefixName(tokenPrefix, ms[i].Name())).Int64()
		if err != nil || tok != aboveClock+1 || got != tok {
			t.Errorf("lock %d: token %d, counter %d (%v); want %d for both (one acquisition)", i, tok, got, err, aboveClock+1)
		}
		owner, _ := ownerFrom(l, c)
		if f, err := admin.HGet(ctx, ms[i].Name(), owner).Int(); f != 1 || err != nil {
			t.Errorf("lock %d: owner's field %d (%v), want 1", i, f, err)
		}
	}

	// Alone: nothing on the wire, a helper sends the script.
	proxy.DropNextReply()
	l0 := mustLock(t, boundedCtx(t, time.Minute), ms[0])
	check(0, l0)

	// In a batch: the first Lock queued is made its sender.
	ls := make([]context.Context, n)
	calls := make([]func() error, 0, n-1)
	for i := 1; i < n; i++ {
		calls = append(calls, func() error {
			l, err := ms[i].Lock(boundedCtx(t, time.Minute))
			ls[i] = l
			return err
		})
	}
	for i, err := range holdBatch(t, c, proxy, calls) {
		if err != nil {
			t.Fatalf("Lock %d in a batch whose reply was lost: %v", i+1, err)
		}
	}
	for i := 1; i < n; i++ {
		check(i, ls[i])
	}
	if d := proxy.Drops(); d != 2 {
		t.Errorf("proxy dropped %d replies, want 2", d)
	}
	for i, l := range append([]context.Context{l0}, ls[1:]...) {
		if err := ms[i].Unlock(l); err != nil {
			t.Errorf("Unlock %d: %v", i, err)
		}
	}
}

// TestLeavingBatchPanicReachesItsSender: when the batch that a Lock whose
// ctx can end is made to send panics (a go-redis hook) on the helper
// goroutine that sends it, the panic reaches that Lock's caller, as it
// would had the caller sent the batch, and the batch no longer counts as
// on the wire.
func TestLeavingBatchPanicReachesItsSender(t *testing.T) {
	rdb := newRedis(t)
	rdb.AddHook(panickyScripts{})
	c := newClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	tr := c.tr
	tr.FillWire()
	defer tr.ClearWire()
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_, _ = m.Lock(boundedCtx(t, time.Minute))
	}()
	eventually(t, 5*time.Second, func() error {
		if n := tr.LeavingQueued(); n != 1 {
			return fmt.Errorf("%d of 1 queued", n)
		}
		return nil
	})
	tr.PassOn()
	if r := recv(t, recovered, 10*time.Second, "the Lock whose batch panicked"); r == nil {
		t.Error("the Lock returned without the batch's panic")
	}
	tr.UnfillWire()
	eventually(t, 5*time.Second, func() error {
		if n := onWireNow(c); n != 0 {
			return fmt.Errorf("%d batches still counted on the wire", n)
		}
		return nil
	})
}

// panickyScripts is a go-redis hook whose pipelines of scripts panic
// (not those that set up a connection).
type panickyScripts struct{}

func (panickyScripts) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (panickyScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (panickyScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
				panic("hook")
			}
		}
		return next(ctx, cmds)
	}
}
