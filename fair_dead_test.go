package dlock

// Tests of the dead-waiter rule beyond Redisson's: a dlock waiter whose
// Client's holder record is gone leaves the fair queue at the next attempt
// of another waiter, instead of holding the queue up for the fair wait
// timeout.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// queueDead puts a waiter of c in the fair queue of name the way a process
// that then died leaves it: one waiting attempt, and nobody attempting
// again. It returns the owner.
func queueDead(t *testing.T, ctx context.Context, c *Client, name string) string {
	t.Helper()
	m := mustFair(t, c, name)
	owner := c.newOwner()
	res, err := m.kind.(*fairKind).attempt(ctx, request{owner: owner, lease: time.Second, wait: true})
	if err != nil || res.acquired {
		t.Fatalf("queueing %s: acquired %v, %v", owner, res.acquired, err)
	}
	return owner
}

// stopRecord stops the refresh of c's holder record without deleting it,
// as a process that dies does: the record expires with its TTL.
func stopRecord(c *Client) {
	r := c.record
	r.mu.Lock()
	stop, done := r.stop, r.done
	r.stop, r.closed = nil, true
	r.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// TestFairDeadDlockWaiterLeaves: a dlock waiter dies while queued (its
// Client has a 3 s watchdog, so its record lives 3 s); the holder unlocks.
// The live waiter behind it gets the lock within a few seconds, not the
// fair wait timeout (5 min), and the queue keys are gone afterwards. On a
// cluster too, where the record is in another slot than the lock.
func TestFairDeadDlockWaiterLeaves(t *testing.T) {
	t.Run("single", func(t *testing.T) { deadDlockWaiterLeaves(t, func() redis.UniversalClient { return nil }) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a cluster")
		}
		cl := sharedCluster(t)
		deadDlockWaiterLeaves(t, func() redis.UniversalClient { return newClusterRedis(t, cl, 5*time.Second) })
	})
}

func deadDlockWaiterLeaves(t *testing.T, open func() redis.UniversalClient) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, open()), name)
	held := mustLock(t, ctx, holder)

	dead := newClient(t, open(), WithWatchdogTimeout(3*time.Second))
	owner := queueDead(t, ctx, dead, name)
	record := layout.ClientRecordPrefix + dead.ID()
	if n := dead.rdb.Exists(ctx, record).Val(); n != 1 {
		t.Fatalf("the queued waiter's record %s is not there", record)
	}
	live := mustFair(t, newClient(t, open()), name)
	_, got := fairWaiter(t, ctx, live, 2)

	stopRecord(dead) // the waiter's process dies
	died := time.Now()
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 20*time.Second, "the live waiter's Lock behind a dead dlock waiter (fair wait timeout 5m)")
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("the live waiter got the lock %v after the dead one's last record refresh (record TTL 3s)", time.Since(died))
	if err := live.Unlock(r.lctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{prefixName(fairQueuePrefix, name), prefixName(fairDeadlinePrefix, name)}
	if n := dead.rdb.Exists(ctx, keys...).Val(); n != 0 {
		t.Errorf("queue keys left: %d of %v (queue %v)", n, keys, fairQueue(t, dead.rdb, name))
	}
	if _, ok := fairDeadline(t, dead.rdb, name, owner); ok {
		t.Errorf("the dead waiter %s keeps its deadline", owner)
	}
}

// TestFairTryLockPastDeadWaiter: a free fair lock whose only waiter is a
// dead dlock waiter (its process died: its record, once written, expired)
// is taken by TryLock at once, and the dead waiter is gone from the queue.
func TestFairTryLockPastDeadWaiter(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	dead := newClient(t, nil)
	queueDead(t, ctx, dead, name)
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	stopRecord(dead)
	if err := dead.rdb.Del(ctx, layout.ClientRecordPrefix+dead.ID()).Err(); err != nil { // as it expires
		t.Fatal(err)
	}
	other := mustFair(t, newClient(t, nil), name)
	l, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock behind a dead dlock waiter: %v (queue %v)", err, fairQueue(t, other.c.rdb, name))
	}
	if q := fairQueue(t, other.c.rdb, name); len(q) != 0 {
		t.Errorf("queue left: %v", q)
	}
	if err := other.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// TestFairLiveWaiterNotTakenForDead: a Client's first waiting attempt
// waits for its holder record, so that a waiter right behind it, checking
// it as the head of a free lock, never finds it without one; and a
// Redisson-shaped owner (version-4 UUID), which has no record by design,
// is never taken for a dead dlock waiter.
func TestFairLiveWaiterNotTakenForDead(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	c := newClient(t, nil)
	m := mustFair(t, c, lockName(t))
	owner := c.newOwner()
	if _, err := m.kind.(*fairKind).attempt(ctx, request{owner: owner, lease: time.Second, wait: true}); err != nil {
		t.Fatal(err)
	}
	if n := c.rdb.Exists(ctx, layout.ClientRecordPrefix+c.ID()).Val(); n != 1 {
		t.Error("a waiting attempt returned before its Client's record was written")
	}
	other := newClient(t, nil)
	if other.goneOwner(ctx, owner) {
		t.Errorf("%s, with its record, taken for dead", owner)
	}
	java, err := newUUID()
	if err != nil {
		t.Fatal(err)
	}
	if other.goneOwner(ctx, java+":1") {
		t.Errorf("the Redisson owner %s:1 taken for a dead dlock waiter", java)
	}
	if _, err := m.kind.(*fairKind).leave(ctx, request{owner: owner}); err != nil {
		t.Fatal(err)
	}
}

// TestFairJoinsAfterRecord: a Client's first waiting attempt does not join
// the queue before the Client's holder record has been written, so that no
// other waiter checking it then finds it without one and drops it.
func TestFairJoinsAfterRecord(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	defer func() { _ = holder.Unlock(held) }()

	c := newClient(t, nil)
	// As if the record's first write were still on its way.
	c.record.started.Store(true)
	c.record.wrote = make(chan struct{})
	m := mustFair(t, c, name)
	owner := c.newOwner()
	done := make(chan error, 1)
	go func() {
		_, err := m.kind.(*fairKind).attempt(ctx, request{owner: owner, lease: time.Second, wait: true})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the attempt returned (%v) before the record was written", err)
	case <-time.After(300 * time.Millisecond):
	}
	if q := fairQueue(t, c.rdb, name); len(q) != 0 {
		t.Fatalf("queued %v before the record was written", q)
	}
	close(c.record.wrote)
	if err := recv(t, done, 10*time.Second, "the attempt after the record's write"); err != nil {
		t.Fatal(err)
	}
	if q := fairQueue(t, c.rdb, name); len(q) != 1 || q[0] != owner {
		t.Errorf("queue %v, want %s", q, owner)
	}
	if _, err := m.kind.(*fairKind).leave(ctx, request{owner: owner}); err != nil {
		t.Fatal(err)
	}
}

// TestFairNeverSeenWaiterKept: a waiter whose Client never wrote its
// holder record (its ACL lacks ~dlock:client:*, the documented minimal
// one) is not taken for dead by a full-permission waiter behind it, which
// checks it as the head while the lock is held: it keeps its place and
// gets the lock first once the holder unlocks.
func TestFairNeverSeenWaiterKept(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	admin := newRedis(t)
	user := "dlock-acl-fair-never-seen"
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user, "reset"}, minimalACL...)...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	restricted := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
	defer restricted.Close()

	name := "app:" + lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	rc := newClient(t, restricted)
	rm := mustFair(t, rc, name)
	owner, got := fairWaiter(t, ctx, rm, 1)
	if n := admin.Exists(ctx, layout.ClientRecordPrefix+rc.ID()).Val(); n != 0 {
		t.Fatalf("the restricted Client wrote its record")
	}

	full := newClient(t, nil)
	if full.goneOwner(ctx, owner) {
		t.Errorf("%s, whose Client never wrote a record, taken for dead", owner)
	}
	behind := full.newOwner()
	fm := mustFair(t, full, name)
	if _, err := fm.kind.(*fairKind).attempt(ctx, request{owner: behind, lease: time.Second, wait: true}); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = fm.kind.(*fairKind).leave(context.Background(), request{owner: behind}) }()
	if q := fairQueue(t, admin, name); len(q) != 2 || q[0] != owner || q[1] != behind {
		t.Fatalf("queue %v, want [%s %s]: the never-seen waiter was pruned", q, owner, behind)
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 10*time.Second, "the restricted waiter's Lock after the unlock")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := rm.Unlock(r.lctx); err != nil {
		t.Fatal(err)
	}
}

// TestFairPrunedWaiterWoken: a live waiter taken out of the queue for
// dead (its record lost, as to an eviction, while its id is in the seen
// set) is woken on its channel, attempts again at once and joins at the
// tail, instead of sleeping out the held lock's lease (about 30 s).
func TestFairPrunedWaiterWoken(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	name := lockName(t)
	holder := mustFair(t, newClient(t, nil), name)
	held := mustLock(t, ctx, holder)
	live := newClient(t, nil)
	lm := mustFair(t, live, name)
	owner, got := fairWaiter(t, ctx, lm, 1)
	stopRecord(live) // no refresh brings the record back during the test
	if err := live.rdb.Del(ctx, layout.ClientRecordPrefix+live.ID()).Err(); err != nil {
		t.Fatal(err)
	}

	other := newClient(t, nil)
	behind := other.newOwner()
	om := mustFair(t, other, name)
	if _, err := om.kind.(*fairKind).attempt(ctx, request{owner: behind, lease: time.Second, wait: true}); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = om.kind.(*fairKind).leave(context.Background(), request{owner: behind}) }()
	eventually(t, 5*time.Second, func() error {
		if q := fairQueue(t, other.rdb, name); len(q) != 2 || q[0] != behind || q[1] != owner {
			return fmt.Errorf("queue %v, want [%s %s]: the pruned waiter has not joined again", q, behind, owner)
		}
		return nil
	})
	if _, err := om.kind.(*fairKind).leave(ctx, request{owner: behind}); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 10*time.Second, "the pruned waiter's Lock after the unlock")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := lm.Unlock(r.lctx); err != nil {
		t.Fatal(err)
	}
}
