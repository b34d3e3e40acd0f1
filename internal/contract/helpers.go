package contract

// The suite's view of Redis (a go-redis client of its own on each master,
// no part of the transport under test), its dial gate, and the waiting
// helpers: every wait is bounded and fails with a message.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// contract is one kind's contract tests on its deployments.
type contract struct {
	kind
	t           *testing.T
	deployments []*Deployment
	renewals    func(*dlock.Client) int
	admins      []*admin // one per deployment, made per test
}

// admin is the suite's own view of one deployment.
type admin struct {
	masters []*redis.Client // PUBSUB, CLIENT KILL, KEYS
	keys    redis.Cmdable   // where a key's commands go
}

// newAdmins connects to the masters of every deployment, closed with t.
func newAdmins(t testing.TB, ds []*Deployment) []*admin {
	t.Helper()
	admins := make([]*admin, len(ds))
	for i, d := range ds {
		a := &admin{}
		for _, addr := range d.Masters() {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = rdb.Close() })
			a.masters = append(a.masters, rdb)
		}
		a.keys = a.masters[0]
		if d.Cluster {
			cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Masters()})
			t.Cleanup(func() { _ = cl.Close() })
			a.keys = cl
		}
		admins[i] = a
	}
	return admins
}

// newClients makes a fresh set of Clients, one per deployment: what one
// process would have.
func (k *contract) newClients(opts ...dlock.Option) []*dlock.Client {
	cs := make([]*dlock.Client, len(k.deployments))
	for i, d := range k.deployments {
		cs[i] = d.Client(k.t, nil, opts...)
	}
	return cs
}

// lockName returns a name unique to the test and registers a check, run
// when the test ends, that nobody is still subscribed to its channels, and
// then deletes what the test left in Redis.
func (k *contract) lockName() string {
	t := k.t
	t.Helper()
	k.admins = newAdmins(t, k.deployments)
	name := "contract:" + strings.ReplaceAll(t.Name(), "/", ":")
	t.Cleanup(func() {
		ctx := context.Background()
		eventually(t, 5*time.Second, func() error {
			// Every kind's channels contain the name: the Mutex's, the
			// read-write lock's, the fair lock's per-waiter ones.
			left, err := k.channels(ctx, "*"+name+"*")
			if err != nil {
				return err
			}
			if len(left) != 0 {
				return fmt.Errorf("subscribers left on %v", left)
			}
			return nil
		})
		for _, a := range k.admins {
			for _, m := range a.masters {
				keys, _ := m.Keys(ctx, "*"+name+"*").Result()
				for _, key := range keys {
					m.Del(ctx, key)
				}
			}
		}
	})
	return name
}

// channels returns the channels matching pattern that have subscribers,
// classic and sharded, on every master.
func (k *contract) channels(ctx context.Context, pattern string) ([]string, error) {
	var all []string
	for _, a := range k.admins {
		for _, m := range a.masters {
			for _, cmd := range []*redis.StringSliceCmd{m.PubSubChannels(ctx, pattern), m.PubSubShardChannels(ctx, pattern)} {
				chs, err := cmd.Result()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", m.Options().Addr, err)
				}
				all = append(all, chs...)
			}
		}
	}
	return all, nil
}

// subscribers returns how many subscribers channel has, classic and
// sharded, on every master.
func (k *contract) subscribers(ctx context.Context, channel string) (int64, error) {
	var n int64
	for _, a := range k.admins {
		for _, m := range a.masters {
			classic, err := m.PubSubNumSub(ctx, channel).Result()
			if err != nil {
				return 0, err
			}
			sharded, err := m.PubSubShardNumSub(ctx, channel).Result()
			if err != nil {
				return 0, err
			}
			n += classic[channel] + sharded[channel]
		}
	}
	return n, nil
}

// wipe deletes lock name's keys behind its holders' backs.
func (k *contract) wipe(name string) {
	k.t.Helper()
	for _, a := range k.admins {
		for _, key := range k.keys(name) {
			if err := a.keys.Del(context.Background(), key).Err(); err != nil {
				k.t.Fatal(err)
			}
		}
	}
}

// keysLeft fails unless no deployment has any of lock name's keys.
func (k *contract) keysLeft(ctx context.Context, name string) error {
	for i, a := range k.admins {
		for _, key := range k.keys(name) {
			if n, err := a.keys.Exists(ctx, key).Result(); err != nil || n != 0 {
				return fmt.Errorf("%s (%v): %s is left (%v)", k.deployments[i].Name, k.deployments[i].Masters(), key, err)
			}
		}
	}
	return nil
}

// awaitWaiter waits until a waiter for lock name has subscribed to its
// channel, and returns that channel ("" when the kind polls).
func (k *contract) awaitWaiter(name string) (channel string) {
	k.t.Helper()
	if k.channel == nil || len(k.deployments) != 1 {
		return ""
	}
	eventually(k.t, 5*time.Second, func() error {
		chs, err := k.channels(context.Background(), k.channel(name))
		if err != nil || len(chs) != 1 {
			return fmt.Errorf("no waiter subscribed yet (%v, %v)", chs, err)
		}
		channel = chs[0]
		return nil
	})
	return channel
}

// noRenewals fails unless no Client of cs renews a lock (when the
// topology can tell).
func (k *contract) noRenewals(cs []*dlock.Client) {
	k.t.Helper()
	if k.renewals == nil {
		return
	}
	for _, c := range cs {
		if n := k.renewals(c); n != 0 {
			k.t.Errorf("watchdog still renews %d locks", n)
		}
	}
}

// dialGate refuses new connections of the Clients that dial through it
// while it is shut, as a server that is down would.
type dialGate struct{ shut atomic.Bool }

func (g *dialGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.shut.Load() {
		return nil, errors.New("dial gate shut: connection refused")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// missNotice makes the waiters subscribed to channel through a Client
// gated by g miss the message that release publishes: it kills the
// subscription connections and keeps them from reconnecting (g) until
// release has run, so that the message reaches nobody. Only the
// resubscription's wake-up can then tell the waiters; without it they
// sleep until the holder's lease runs out.
func (k *contract) missNotice(g *dialGate, channel string, release func() error) {
	t := k.t
	t.Helper()
	ctx := t.Context()
	g.shut.Store(true)
	defer g.shut.Store(false)
	for _, a := range k.admins {
		for _, m := range a.masters {
			if err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 5*time.Second, func() error {
		n, err := k.subscribers(ctx, channel)
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d subscribers on %s", n, channel)
		}
		return nil
	})
	if err := release(); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recv receives a value from ch, failing the test if none comes within
// timeout.
func recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("%s: nothing within %v", what, timeout)
		var zero T
		return zero
	}
}

// awaitDone waits until ctx ends, failing the test if it does not within
// timeout.
func awaitDone(t testing.TB, ctx context.Context, timeout time.Duration, what string) {
	t.Helper()
	recv(t, ctx.Done(), timeout, what)
}

// mustLock locks l or fails the test.
func mustLock(t testing.TB, ctx context.Context, l dlock.Locker) context.Context {
	t.Helper()
	lctx, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lctx
}

// tokenChecker returns a function that fails the test unless each lock
// context it is given carries a fencing token higher than the last one.
func tokenChecker(t *testing.T) func(context.Context) {
	var prev int64
	return func(l context.Context) {
		t.Helper()
		tok, ok := dlock.Token(l)
		if !ok || tok <= prev {
			t.Fatalf("token %d (ok %v) after %d: not strictly increasing", tok, ok, prev)
		}
		prev = tok
	}
}

// lockAndUnlock locks l in a new goroutine (a new owner), unlocks it at
// once, and sends the first error, or nil, on the channel it returns.
func lockAndUnlock(ctx context.Context, l dlock.Locker) <-chan error {
	got := make(chan error, 1)
	go func() {
		lctx, err := l.Lock(ctx)
		if err == nil {
			err = l.Unlock(lctx)
		}
		got <- err
	}()
	return got
}

// noPanic runs f and turns a panic into an error.
func noPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}
