package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// Owners written into fair queues by hand: a Redisson (Java) waiter, whose
// UUID is of version 4 and which writes no holder record, a dlock waiter
// (version 8) whose record was written once (its id is in the seen set)
// and is gone, and a dlock waiter whose record was never written (an ACL
// without the records' pattern): unknown, not gone.
const (
	javaWaiter  = "11111111-2222-4333-8444-555555555555:7"
	goneDlock   = "22222222-3333-8444-9555-666666666666:3"
	unseenDlock = "33333333-4444-8555-9666-777777777777:2"
)

// markSeen puts the Client of owner in the seen set, as its first record
// write did, until the test ends.
func markSeen(t *testing.T, rdb *redis.Client, owner string) {
	t.Helper()
	id := clientID(owner)
	score := float64(time.Now().Add(-time.Minute).UnixMilli())
	if err := rdb.ZAdd(t.Context(), layout.ClientSeenKey, redis.Z{Score: score, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ZRem(context.Background(), layout.ClientSeenKey, id) })
}

// queueByHand appends owners to the fair queue of name, each with a
// deadline an hour away, as a waiter that then died leaves them.
func queueByHand(t *testing.T, rdb *redis.Client, name string, owners ...string) {
	t.Helper()
	ctx := t.Context()
	deadline := float64(time.Now().Add(time.Hour).UnixMilli())
	for _, o := range owners {
		if err := rdb.RPush(ctx, layout.Prefixed(layout.QueuePrefix, name), o).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, layout.Prefixed(layout.TimeoutPrefix, name), redis.Z{Score: deadline, Member: o}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusNamesWaiters: dlock status names each fair waiter's client as
// it does holders': a live dlock waiter by its host and pid, a Redisson
// one as unknown, a dlock one whose record is gone as gone; list shows
// the waiters too.
func TestStatusNamesWaiters(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx := mustLock(t, m, t.Context())
	defer func() { _ = m.Unlock(lockCtx) }()
	waitingClient(t, name, "fair")
	eventually(t, 10*time.Second, func() error {
		if n := rdb.LLen(t.Context(), layout.Prefixed(layout.QueuePrefix, name)).Val(); n != 1 {
			return fmt.Errorf("%d queued, want the live waiter", n)
		}
		return nil
	})
	markSeen(t, rdb, goneDlock)
	queueByHand(t, rdb, name, javaWaiter, goneDlock, unseenDlock)

	r := cliRun(t, "status", "--json", name)
	var st lockState
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || len(st.Queue) != 4 {
		t.Fatalf("status --json: exit %d, %v, want 4 waiters in:\n%s", r.code, err, r.stdout)
	}
	if ci := st.Queue[0].Client; ci == nil || ci.PID != os.Getpid() || st.Queue[0].Gone {
		t.Errorf("status --json: the live waiter: client %+v, gone %v; want pid %d", ci, st.Queue[0].Gone, os.Getpid())
	}
	if st.Queue[1].Client != nil || st.Queue[1].Gone {
		t.Errorf("status --json: the Redisson waiter: client %+v, gone %v; want neither", st.Queue[1].Client, st.Queue[1].Gone)
	}
	if st.Queue[2].Client != nil || !st.Queue[2].Gone {
		t.Errorf("status --json: the dead dlock waiter: client %+v, gone %v; want gone", st.Queue[2].Client, st.Queue[2].Gone)
	}
	if st.Queue[3].Client != nil || st.Queue[3].Gone {
		t.Errorf("status --json: the never-seen dlock waiter: client %+v, gone %v; want neither", st.Queue[3].Client, st.Queue[3].Gone)
	}

	r = cliRun(t, "status", name)
	for _, want := range []string{
		`(?m)^1  ` + regexp.QuoteMeta(st.Queue[0].Owner) + `  in \S+ +\S+.* on \S+, pid ` + fmt.Sprint(os.Getpid()) + `, started `,
		`(?m)^2  ` + regexp.QuoteMeta(javaWaiter) + `  in \S+ +` + regexp.QuoteMeta(unknownHolder) + `$`,
		`(?m)^3  ` + regexp.QuoteMeta(goneDlock) + `  in \S+ +` + regexp.QuoteMeta(goneWaiter) + `$`,
		`(?m)^4  ` + regexp.QuoteMeta(unseenDlock) + `  in \S+ +` + regexp.QuoteMeta(unknownHolder) + `$`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("status: no line matches %s in:\n%s", want, r.stdout)
		}
	}
	r = cliRun(t, "list", name)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +fair +1, 4 waiting `).MatchString(r.stdout) {
		t.Errorf("list: want fair, 1 holder, 4 waiting:\n%s", r.stdout)
	}
}

// TestClearQueue: a free fair lock whose queue holds only waiters that are
// gone is listed, by list and top, as free with its waiters; unlock says
// there is nothing to unlock and points to clear-queue, which asks first
// and then deletes both queue keys, leaving nothing.
func TestClearQueue(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	markSeen(t, rdb, goneDlock)
	queueByHand(t, rdb, name, javaWaiter, goneDlock)
	keys := []string{layout.Prefixed(layout.QueuePrefix, name), layout.Prefixed(layout.TimeoutPrefix, name)}

	r := cliRun(t, "list", name)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +fair +free, 2 waiting +- +-$`).MatchString(r.stdout) {
		t.Errorf("list: want the free lock with 2 waiting:\n%s", r.stdout)
	}
	r = cliRun(t, "top", "--once", "--json", name)
	var rows []topLock
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0].Waiters != 2 || rows[0].Kind != "fair" {
		t.Errorf("top --once --json: %v, want one fair lock with 2 waiters: %s", err, r.stdout)
	}
	r = cliRun(t, "unlock", "--force", "--yes", name)
	if r.code != 0 || !strings.Contains(r.stdout, "2 waiters in its queue: dlock clear-queue") {
		t.Errorf("unlock --force --yes: exit %d, want the clear-queue hint:\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = cliRunEnv(t, nil, "n\n", "clear-queue", name)
	if r.code != exitFailure || !strings.Contains(r.stderr, goneDlock+": "+goneWaiter) || !strings.Contains(r.stderr, "Delete the queue of "+fmt.Sprintf("%q", name)+", 2 waiters? [y/N]") {
		t.Errorf("clear-queue, answered no: exit %d, want %d and a question naming the waiters:\n%s", r.code, exitFailure, r.stderr)
	}
	if n := rdb.Exists(t.Context(), keys...).Val(); n != 2 {
		t.Fatalf("clear-queue, answered no: %d of the queue keys left, want 2", n)
	}
	r = cliRun(t, "clear-queue", "--yes", name)
	if r.code != 0 || !strings.Contains(r.stdout, "cleared the queue of") {
		t.Errorf("clear-queue --yes: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := rdb.Exists(t.Context(), keys...).Val(); n != 0 {
		t.Errorf("clear-queue --yes: %d of %v left", n, keys)
	}
	r = cliRun(t, "list", name)
	if !strings.Contains(r.stdout, "no locks match") {
		t.Errorf("list after clear-queue: want nothing:\n%s", r.stdout)
	}
}

// TestFairNoQueueKindAgrees: a held fair lock nobody waits for has the
// Mutex's layout (Redisson deletes an empty queue); status, list and top
// all name its kind the same way.
func TestFairNoQueueKindAgrees(t *testing.T) {
	name := lockName(t)
	c, err := dlock.New(newRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx := mustLock(t, m, t.Context())
	defer func() { _ = m.Unlock(lockCtx) }()

	var st lockState
	var locks []lockState
	var rows []topLock
	for _, v := range []struct {
		args []string
		into any
	}{
		{[]string{"status", "--json", name}, &st},
		{[]string{"list", "--json", name}, &locks},
		{[]string{"top", "--once", "--json", name}, &rows},
	} {
		r := cliRun(t, v.args...)
		if err := json.Unmarshal([]byte(r.stdout), v.into); err != nil || r.code != 0 {
			t.Fatalf("%v: exit %d, %v in %s", v.args, r.code, err, r.stdout)
		}
	}
	if len(locks) != 1 || len(rows) != 1 || st.Kind != "mutex" || locks[0].Kind != st.Kind || rows[0].Kind != st.Kind {
		t.Errorf("kinds: status %q, list %+v, top %+v; want mutex in each", st.Kind, locks, rows)
	}
}

// TestFairKilledWaiterLeaves: a dlock run waiter (watchdog 3 s, so its
// holder record lives 3 s) killed with -9 while queued does not hold up
// the waiter behind it: that one runs within seconds of the unlock, not
// after the fair wait timeout (5 min) nor the unlocker's lease (had the
// unlock handed it the lock), and the queue keys are gone.
func TestFairKilledWaiterLeaves(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx := mustLock(t, m, t.Context())
	queued := func(n int64) {
		t.Helper()
		eventually(t, 20*time.Second, func() error {
			if got := rdb.LLen(t.Context(), layout.Prefixed(layout.QueuePrefix, name)).Val(); got != n {
				return fmt.Errorf("%d queued, want %d", got, n)
			}
			return nil
		})
	}
	dead, _, _ := dlockProcess(t, "run", "--kind", "fair", "--watchdog", "3s", name, "--", "true")
	queued(1)
	next, _, stderr := dlockProcess(t, "run", "--kind", "fair", name, "--", "true")
	queued(2)
	deadOwner := rdb.LIndex(t.Context(), layout.Prefixed(layout.QueuePrefix, name), 0).Val()
	if err := dead.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	killed := time.Now()
	// Once Redis has seen its connection close, its subscription is gone
	// and the unlock wakes it rather than hand it the lock (which it would
	// hold for a lease, as a holder that dies does).
	channel := layout.Prefixed(layout.LockChannelPrefix, name) + ":" + deadOwner
	eventually(t, 10*time.Second, func() error {
		if n := rdb.PubSubNumSub(t.Context(), channel).Val()[channel]; n != 0 {
			return fmt.Errorf("%d subscribed to %s", n, channel)
		}
		return nil
	})
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, next); code != 0 {
		t.Fatalf("the waiter behind the killed one: exit %d: %s", code, stderr.String())
	}
	took := time.Since(killed)
	t.Logf("the waiter behind the killed one ran %v after the kill (its record's TTL: 3s)", took)
	if took > 20*time.Second {
		t.Errorf("the waiter behind the killed one ran %v after the kill, want within seconds", took)
	}
	keys := []string{layout.Prefixed(layout.QueuePrefix, name), layout.Prefixed(layout.TimeoutPrefix, name)}
	if n := rdb.Exists(t.Context(), keys...).Val(); n != 0 {
		t.Errorf("%d of %v left", n, keys)
	}
}

// TestClearQueueWakesWaiters: clear-queue wakes the live waiter it took
// out of the queue, which attempts again at once and joins anew, instead
// of sleeping out its timer (the held lock's lease, about 30 s here); once
// the lock is freed it gets it.
func TestClearQueueWakesWaiters(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	queue := layout.Prefixed(layout.QueuePrefix, name)
	holderClient, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer holderClient.Close()
	holder, err := holderClient.NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	held := mustLock(t, holder, t.Context())

	waiterClient, err := dlock.New(newRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer waiterClient.Close()
	waiter, err := waiterClient.NewFairMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		lctx, err := waiter.Lock(ctx)
		if err == nil {
			err = waiter.Unlock(lctx)
		}
		got <- err
	}()
	var first string
	eventually(t, 10*time.Second, func() error {
		q := rdb.LRange(t.Context(), queue, 0, -1).Val()
		if len(q) != 1 {
			return fmt.Errorf("queue %v, want the waiter", q)
		}
		first = q[0]
		return nil
	})
	if r := cliRun(t, "clear-queue", "--yes", name); r.code != 0 {
		t.Fatalf("clear-queue --yes: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	eventually(t, 5*time.Second, func() error {
		if q := rdb.LRange(t.Context(), queue, 0, -1).Val(); len(q) != 1 || q[0] != first {
			return fmt.Errorf("queue %v: the waiter %s, woken by clear-queue, has not joined again", q, first)
		}
		return nil
	})
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock within 10s of its release")
	}
}
