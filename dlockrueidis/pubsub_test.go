package dlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

// A rueidis client whose blocking pool the application's own BLPOP holds:
// the pub/sub connection cannot be had, and a waiter's Lock must still end
// at its ctx's deadline, and Client.Close promptly, instead of waiting
// for the pool under the hub's mutex; nor may the hub's reader linger
// after Close until the pool frees.
func TestWaiterEndsWhileBlockingPoolIsFull(t *testing.T) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true, BlockingPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	admin := newRedis(t)
	list := testName(t) + ":list"
	blpop := make(chan error, 1)
	go func() { blpop <- rc.Do(context.Background(), rc.B().Blpop().Key(list).Timeout(0).Build()).Error() }()
	t.Cleanup(func() {
		admin.LPush(context.Background(), list, "x")
		awaitDone(t, blpop, 10*time.Second, "the application's BLPOP")
	})
	ctx := boundedCtx(t, 30*time.Second)
	for {
		s, _ := admin.ClientList(ctx).Result()
		if strings.Contains(s, "cmd=blpop") {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("BLPOP never blocked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	holder := must(newGoRedisClient(t).NewMutex(testName(t)))
	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(held)

	c, err := dlockrueidis.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	m := must(c.NewMutex(testName(t)))
	locked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := m.Lock(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			locked <- errors.New("Lock: want its deadline's error, got " + errString(err))
			return
		}
		locked <- nil
	}()
	awaitDone(t, locked, 10*time.Second, "Lock(ctx 1s) while the blocking pool is full")
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	awaitDone(t, closed, 5*time.Second, "Client.Close while the blocking pool is full")
	// The hub's reader, which was waiting for the pool, is gone too: it
	// does not linger until the application's BLPOP ends.
	eventually(t, 5*time.Second, func() error {
		if n := redistest.GoroutinesIn("dlockrueidis.(*conn).open("); n > 0 {
			return fmt.Errorf("%d pub/sub readers still wait for the blocking pool after Close", n)
		}
		return nil
	})
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// Client.Close while the server has stopped answering, with a waiter
// subscribed: the waiter's unsubscribe and the pub/sub connection's
// closing must not wait for the silent server (rueidis's own timeouts
// took 13 s; go-redis takes 5 s).
func TestCloseOnSilentServer(t *testing.T) {
	p := redistest.NewTestProxy(t, redisAddr)
	c := newClientOn(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}})
	holder := must(newGoRedisClient(t).NewMutex(testName(t)))
	ctx := boundedCtx(t, 60*time.Second)
	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(held)
	m := must(c.NewMutex(testName(t)))
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	locked := make(chan error, 1)
	go func() { _, err := m.Lock(lctx); locked <- err }()
	admin := newRedis(t)
	channel := "redisson_lock__channel:{" + testName(t) + "}"
	for {
		n, _ := admin.PubSubNumSub(ctx, channel).Result()
		if n[channel] == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the waiter never subscribed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.SetLatency(20 * time.Second)
	defer p.CloseAll()
	defer p.SetLatency(0)
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	awaitDone(t, closed, 8*time.Second, "Client.Close on a silent server")
	t.Logf("Close took %v", time.Since(start))
	cancel()
	select {
	case <-locked:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock still blocked 10s after Close and its ctx's end")
	}
}
