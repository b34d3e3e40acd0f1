package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// newElection makes an election or fails the test.
func newElection(t testing.TB, c *Client, name string, opts ...LockOption) *Election {
	t.Helper()
	e, err := c.NewElection(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// mustCampaign campaigns or fails the test.
func mustCampaign(t testing.TB, ctx context.Context, e *Election, value string) context.Context {
	t.Helper()
	lctx, err := e.Campaign(ctx, value)
	if err != nil {
		t.Fatalf("campaign %q: %v", value, err)
	}
	return lctx
}

// describe is a change as a test compares it: the value, or "none".
func describe(info LeaderInfo) string {
	if info.Owner == "" {
		return "none"
	}
	return info.Value
}

// TestElectionCampaignProclaimResign: the leader's value, holder and token
// are what Leader says; Proclaim changes the value and is refused to a
// non-leader; Resign leaves nothing of the leadership in Redis.
func TestElectionCampaignProclaimResign(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	rdb := newRedis(t)
	name := lockName(t)
	a := newElection(t, newClient(t, nil, WithClientName("candidate a")), name)
	b := newElection(t, newClient(t, nil), name)

	if _, err := a.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	lead := mustCampaign(t, ctx, a, "a1")
	info, err := b.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := a.c.Owner(lead)
	tok, _ := Token(lead)
	if info.Value != "a1" || info.Owner != owner || info.Token != tok || info.Token <= 0 || info.Seq != 0 ||
		info.Holder.PID != os.Getpid() || info.Holder.Name != "candidate a" || time.Since(info.Since) > 10*time.Second {
		t.Fatalf("Leader = %+v, want a1 by %s with token %d", info, owner, tok)
	}
	if pttl(t, rdb, layout.Prefixed(layout.ElectionPrefix, name)) <= 0 {
		t.Error("the election record has no expiry")
	}

	if err := a.Proclaim(lead, "a2"); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Leader(ctx); err != nil || info.Value != "a2" || info.Seq != 1 {
		t.Fatalf("Leader after Proclaim = %+v, %v", info, err)
	}
	if err := a.Proclaim(ctx, "not a leader context"); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Proclaim with a plain context: %v, want ErrNotLeader", err)
	}
	if err := b.Proclaim(lead, "b's election, a's context"); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Proclaim through another Election: %v, want ErrNotLeader", err)
	}

	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, lead, 5*time.Second, "leader context after Resign")
	if err := a.Proclaim(lead, "a3"); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Proclaim after Resign: %v, want ErrNotLeader", err)
	}
	if err := a.Resign(lead); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Resign twice: %v, want ErrNotLeader", err)
	}
	if _, err := b.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Errorf("Leader after Resign: %v, want ErrNoLeader", err)
	}
	keys, err := rdb.Keys(ctx, "*"+name+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The fencing counter is the lock's own key, kept so that tokens never
	// go backwards; nothing else may be left.
	if keys = slices.DeleteFunc(keys, func(k string) bool { return k == layout.Prefixed(layout.TokenPrefix, name) }); len(keys) > 0 {
		t.Errorf("left in Redis after Resign: %v", keys)
	}

	// A leader whose lock is gone (unnoticed yet) cannot proclaim, and
	// learns so through its leader context.
	lead = mustCampaign(t, ctx, b, "b1")
	if err := rdb.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Proclaim(lead, "b2"); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Proclaim without the lock: %v, want ErrNotLeader", err)
	}
	awaitDone(t, lead, 5*time.Second, "leader context after Proclaim found the lock gone")
	if _, err := a.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Errorf("Leader without the lock: %v, want ErrNoLeader", err)
	}
}

// TestElectionObserversAgree: observers on three Clients see every change
// (elected, proclaimed, resigned, the next leader) once, in the same order.
func TestElectionObserversAgree(t *testing.T) {
	ctx := boundedCtx(t, 60*time.Second)
	name := lockName(t)
	const observers = 3
	var seen [observers]<-chan LeaderInfo
	octx, stop := context.WithCancel(ctx)
	defer stop()
	for i := range seen {
		seen[i] = newElection(t, newClient(t, nil), name).Observe(octx)
		if got := recv(t, seen[i], 10*time.Second, "observer's first report"); got.Owner != "" {
			t.Fatalf("observer %d: first report %+v, want no leader", i, got)
		}
	}
	a := newElection(t, newClient(t, nil), name)
	b := newElection(t, newClient(t, nil), name)
	leadA := mustCampaign(t, ctx, a, "a1")
	bElected := make(chan context.Context, 1)
	go func() {
		lctx, err := b.Campaign(ctx, "b1")
		if err != nil {
			t.Error(err)
			lctx = ctx
		}
		bElected <- lctx
	}()
	for _, v := range []string{"a2", "a3"} {
		if err := a.Proclaim(leadA, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Resign(leadA); err != nil {
		t.Fatal(err)
	}
	leadB := recv(t, bElected, 10*time.Second, "b elected after a resigned")
	if err := b.Proclaim(leadB, "b2"); err != nil {
		t.Fatal(err)
	}
	if err := b.Resign(leadB); err != nil {
		t.Fatal(err)
	}
	want := []string{"a1", "a2", "a3", "none", "b1", "b2", "none"}
	for i, ch := range seen {
		var got []string
		var last revision
		for len(got) < len(want) {
			info := recv(t, ch, 10*time.Second, fmt.Sprintf("observer %d after %v", i, got))
			if r := revisionOf(info); !r.after(last) {
				t.Errorf("observer %d: revision %v after %v", i, r, last)
			}
			last = revisionOf(info)
			got = append(got, describe(info))
		}
		if !slices.Equal(got, want) {
			t.Errorf("observer %d saw %v, want %v", i, got, want)
		}
	}
}

// TestElectionStaleEndDropped: a leader whose loss its Client finds only
// after the next leader was elected announces its end late; observers
// drop it, since they saw a later leadership, and never report "no
// leader" (or the old leader) after the new one.
func TestElectionStaleEndDropped(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	rdb := newRedis(t)
	name := lockName(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := newElection(t, newClient(t, nil), name).Observe(octx)
	recv(t, seen, 10*time.Second, "observer's first report")
	a := newElection(t, newClient(t, nil), name)
	b := newElection(t, newClient(t, nil), name)
	leadA := mustCampaign(t, ctx, a, "a1")
	if err := rdb.Del(ctx, name).Err(); err != nil { // the lock goes unnoticed by a
		t.Fatal(err)
	}
	leadB := mustCampaign(t, ctx, b, "b1")
	l := leadA.Value(leaderKey{a}).(*leadership)
	l.lose(leadA) // as a's keeper or watchdog finds it, later
	awaitDone(t, leadA, 5*time.Second, "a's leader context after its loss")
	recv(t, l.done, 5*time.Second, "a's keeper, which announces the end")
	if err := b.Proclaim(leadB, "b2"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 {
		got = append(got, describe(recv(t, seen, 10*time.Second, fmt.Sprintf("change after %v", got))))
	}
	if want := []string{"a1", "b1", "b2"}; !slices.Equal(got, want) {
		t.Errorf("observer saw %v, want %v", got, want)
	}
	if err := b.Resign(leadB); err != nil {
		t.Fatal(err)
	}
}

// TestElectionNoLeaderOnce: an observer that has reported "no leader"
// does not report it again when the end of a leadership it never saw
// comes late. Here the record of a's leadership is gone (it expired)
// before the observer starts, which reads "no leader" (token 0); a's end,
// announced after, has a's newer token but says nothing new, and the next
// change the observer reports is b's election.
func TestElectionNoLeaderOnce(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	rdb := newRedis(t)
	name := lockName(t)
	a := newElection(t, newClient(t, nil), name)
	leadA := mustCampaign(t, ctx, a, "a1")
	if err := rdb.Del(ctx, layout.Prefixed(layout.ElectionPrefix, name)).Err(); err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := newElection(t, newClient(t, nil), name).Observe(octx)
	if got := recv(t, seen, 10*time.Second, "observer's first report"); got.Owner != "" || got.Token != 0 {
		t.Fatalf("observer's first report %+v, want no leader (token 0)", got)
	}
	// a's end, announced by Resign, or by its keeper had it found the
	// record gone first: either way before its keeper returns.
	if err := a.Resign(leadA); err != nil && !errors.Is(err, ErrNotLeader) {
		t.Fatal(err)
	}
	recv(t, leadA.Value(leaderKey{a}).(*leadership).done, 10*time.Second, "a's keeper")
	b := newElection(t, newClient(t, nil), name)
	leadB := mustCampaign(t, ctx, b, "b1")
	if got := recv(t, seen, 10*time.Second, "b elected"); got.Value != "b1" {
		t.Errorf("observer reported %+v after \"no leader\", want b1 (a second \"no leader\", for a's late end?)", got)
	}
	if err := b.Resign(leadB); err != nil {
		t.Fatal(err)
	}
}

// TestElectionLossCancelsLeaderCtx: when the leadership is gone from Redis
// (the lock deleted, or the election record), the leader context is
// cancelled with ErrLockLost and observers are told there is no leader.
func TestElectionLossCancelsLeaderCtx(t *testing.T) {
	for _, gone := range []string{"lock", "record"} {
		t.Run(gone, func(t *testing.T) {
			ctx := boundedCtx(t, 60*time.Second)
			rdb := newRedis(t)
			name := lockName(t)
			// The record case has a long lease, so that a lock kept after
			// the record went (until its lease ran out) is told from a
			// lock given back.
			lease := time.Second
			if gone == "record" {
				lease = 12 * time.Second
			}
			octx, stop := context.WithCancel(ctx)
			defer stop()
			seen := newElection(t, newClient(t, nil), name).Observe(octx)
			recv(t, seen, 10*time.Second, "observer's first report")
			a := newElection(t, newClient(t, nil, WithWatchdogTimeout(lease)), name)
			lead := mustCampaign(t, ctx, a, "a1")
			if got := recv(t, seen, 10*time.Second, "a elected"); got.Value != "a1" {
				t.Fatalf("observer saw %+v, want a1", got)
			}
			b := newElection(t, newClient(t, nil), name)
			key := name
			if gone == "record" {
				key = layout.Prefixed(layout.ElectionPrefix, name)
			}
			if err := rdb.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			awaitDone(t, lead, lease+10*time.Second, "leader context after the leadership was deleted")
			lost := time.Now()
			if cause := context.Cause(lead); !errors.Is(cause, ErrLockLost) {
				t.Errorf("cause %v, want ErrLockLost", cause)
			}
			// Told by a's announcement: the record of a deleted lock would
			// outlive it by up to a lease otherwise.
			if got := recv(t, seen, 3*time.Second, "no leader after the loss"); got.Owner != "" {
				t.Errorf("observer saw %+v, want no leader", got)
			}
			// The next candidate is elected at once: a's lock was given
			// back (the record case), not kept until its lease ran out.
			bctx, cancel := context.WithTimeout(ctx, lease+5*time.Second)
			defer cancel()
			if _, err := b.Campaign(bctx, "b1"); err != nil {
				t.Fatalf("b's campaign after a's loss: %v", err)
			}
			if waited := time.Since(lost); gone == "record" && waited > lease/2 {
				t.Errorf("b elected %v after a's loss; a kept the lock (lease %v)", waited, lease)
			}
		})
	}
}

// TestElectionRecordOutlivesLock: the record's expiry is the lock's TTL
// plus one keep interval, so that a TTL copied from a lock near its end
// (after a stall) does not let the record expire before the next keep.
func TestElectionRecordOutlivesLock(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	rdb := newRedis(t)
	name := lockName(t)
	const lease = 9 * time.Second
	e := newElection(t, newClient(t, nil, WithWatchdogTimeout(lease)), name)
	lead := mustCampaign(t, ctx, e, "v")
	defer func() { _ = e.Resign(lead) }()
	record := layout.Prefixed(layout.ElectionPrefix, name)
	pipe := rdb.Pipeline()
	lockTTL, recordTTL := pipe.PTTL(ctx, name), pipe.PTTL(ctx, record)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if d := recordTTL.Val() - lockTTL.Val(); d < lease/6 || d > lease/3+time.Second {
		t.Errorf("record TTL %v, lock TTL %v: want the record to outlive the lock by about %v", recordTTL.Val(), lockTTL.Val(), lease/3)
	}
	if info, err := e.Leader(ctx); err != nil || info.Value != "v" {
		t.Errorf("Leader: %+v, %v", info, err)
	}
}

// TestElectionRefusesReentry: a Campaign whose ctx holds the election's
// lock already (a leader context of another Election on the name, or a
// Mutex's lock context of it) is refused: a re-entry would share the
// hold, and one leadership's end would end both.
func TestElectionRefusesReentry(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	c := newClient(t, nil)
	name := lockName(t)
	e1, e2 := newElection(t, c, name), newElection(t, c, name)
	lead := mustCampaign(t, ctx, e1, "one")
	cctx, cancel := context.WithTimeout(lead, 5*time.Second)
	defer cancel()
	if _, err := e2.Campaign(cctx, "two"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("second Election's Campaign with the first's leader context: %v, want ErrInvalidOption", err)
	}
	if err := e1.Resign(lead); err != nil {
		t.Fatal(err)
	}
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx2, cancel2 := context.WithTimeout(lockCtx, 5*time.Second)
	defer cancel2()
	if _, err := e1.Campaign(cctx2, "three"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Campaign with a Mutex's lock context of the name: %v, want ErrInvalidOption", err)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatalf("the Mutex's hold was disturbed: %v", err)
	}
}

// TestElectionCampaignCtxEndsAfterLock: a ctx that ends between taking
// the lock and recording the leader does not fail an elected Campaign:
// the record is written on the leadership's time.
func TestElectionCampaignCtxEndsAfterLock(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	rdb := newRedis(t)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rdb.AddHook(cancelBeforeHook{marker: "a1", cancel: cancel})
	e := newElection(t, newClient(t, rdb), name)
	lead, err := e.Campaign(cctx, "a1")
	if err != nil {
		t.Fatalf("campaign whose ctx ended after the lock was taken: %v", err)
	}
	if cctx.Err() == nil {
		t.Fatal("the hook did not cancel the campaign's ctx")
	}
	if info, err := e.Leader(ctx); err != nil || info.Value != "a1" {
		t.Errorf("Leader: %+v, %v", info, err)
	}
	if err := e.Resign(lead); err != nil {
		t.Error(err)
	}
}

// cancelBeforeHook cancels a context just before the first command that
// carries marker among its arguments is sent (the elect script's value).
type cancelBeforeHook struct {
	marker string
	cancel context.CancelFunc
}

func (cancelBeforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelBeforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.Contains(cmd.Args(), any(h.marker)) {
			h.cancel()
		}
		return next(ctx, cmd)
	}
}

func (cancelBeforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestElectionLeaderGoneIsReplaced: a leader whose Client stops without
// Resign (closed: its lock expires with its lease), or that cannot reach
// Redis any more (partitioned, as if paused), is replaced within about a
// lease; the partitioned one's leader context is cancelled on its own
// clock, and observers see the new leader after the old one.
func TestElectionLeaderGoneIsReplaced(t *testing.T) {
	for _, how := range []string{"closed", "partitioned"} {
		t.Run(how, func(t *testing.T) {
			ctx := boundedCtx(t, 60*time.Second)
			name := lockName(t)
			const lease = 2 * time.Second
			octx, stop := context.WithCancel(ctx)
			defer stop()
			seen := newElection(t, newClient(t, nil), name).Observe(octx)
			recv(t, seen, 10*time.Second, "observer's first report")
			g := &dialGate{}
			rdbA := redis.NewClient(&redis.Options{Addr: redisAddr, Dialer: g.dial, ClientName: "leader-a"})
			defer rdbA.Close()
			ca := newClient(t, rdbA, WithWatchdogTimeout(lease))
			a := newElection(t, ca, name)
			b := newElection(t, newClient(t, nil, WithWatchdogTimeout(lease)), name)
			leadA := mustCampaign(t, ctx, a, "a")
			bElected := make(chan context.Context, 1)
			go func() {
				lctx, err := b.Campaign(ctx, "b")
				if err != nil {
					t.Error(err)
					lctx = ctx
				}
				bElected <- lctx
			}()
			if got := recv(t, seen, 10*time.Second, "a elected"); got.Value != "a" {
				t.Fatalf("observer saw %+v, want a", got)
			}
			start := time.Now()
			switch how {
			case "closed":
				if err := ca.Close(); err != nil {
					t.Fatal(err)
				}
			case "partitioned":
				g.shut.Store(true)
				killNamed(t, ctx, "leader-a")
				awaitDone(t, leadA, lease+5*time.Second, "the partitioned leader's context")
				if d := time.Since(start); d > lease+time.Second {
					t.Errorf("partitioned leader told after %v, lease %v", d, lease)
				}
			}
			leadB := recv(t, bElected, lease+10*time.Second, "b elected")
			if d := time.Since(start); d > lease+3*time.Second {
				t.Errorf("b elected %v after a was gone, lease %v", d, lease)
			}
			var got []string
			for len(got) == 0 || got[len(got)-1] != "b" {
				got = append(got, describe(recv(t, seen, 2*lease+5*time.Second, fmt.Sprintf("b after %v", got))))
			}
			// "none" may come between (the expired record found first).
			if got = slices.DeleteFunc(got, func(s string) bool { return s == "none" }); !slices.Equal(got, []string{"b"}) {
				t.Errorf("after a: %v, want b", got)
			}
			if err := b.Resign(leadB); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// killNamed closes the server's connections of clients named name.
func killNamed(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	rdb := newRedis(t)
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				if err := rdb.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestElectionObserverMissedChange: a change published while an
// observer's subscription connection is down reaches it once the
// subscription is back (the hub reports the gap and the observer reads
// the record), not only at the record's expiry a lease later.
func TestElectionObserverMissedChange(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	g := &dialGate{}
	co := gatedClient(t, g) // the default 30s lease: its safety net is far
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := newElection(t, co, name).Observe(octx)
	recv(t, seen, 10*time.Second, "observer's first report")
	a := newElection(t, newClient(t, nil), name)
	lead := mustCampaign(t, ctx, a, "a1")
	if got := recv(t, seen, 10*time.Second, "a elected"); got.Value != "a1" {
		t.Fatalf("observer saw %+v, want a1", got)
	}
	missNotice(t, co, g, layout.Prefixed(layout.ElectionChannelPrefix, name), func() error {
		return a.Proclaim(lead, "a2")
	})
	if got := recv(t, seen, 10*time.Second, "the change made while the observer was cut off"); got.Value != "a2" || got.Seq != 1 {
		t.Errorf("observer saw %+v, want a2", got)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
}

// TestElectionCluster: on a Redis Cluster (sharded pub/sub where the
// cluster has it) an observer sees every change, and nothing is left after
// Resign but the fencing counter.
func TestElectionCluster(t *testing.T) {
	cl := sharedCluster(t)
	ctx := boundedCtx(t, 60*time.Second)
	name := "election:" + t.Name() + ":" + fmt.Sprint(time.Now().UnixNano())
	rdb := newClusterRedis(t, cl, time.Second)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := newElection(t, newClient(t, newClusterRedis(t, cl, time.Second)), name).Observe(octx)
	if got := recv(t, seen, 10*time.Second, "observer's first report"); got.Owner != "" {
		t.Fatalf("first report %+v, want no leader", got)
	}
	a := newElection(t, newClient(t, rdb), name)
	b := newElection(t, newClient(t, newClusterRedis(t, cl, time.Second)), name)
	lead := mustCampaign(t, ctx, a, "a1")
	if err := a.Proclaim(lead, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
	lead = mustCampaign(t, ctx, b, "b1")
	if err := b.Resign(lead); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 5 {
		got = append(got, describe(recv(t, seen, 10*time.Second, fmt.Sprintf("change after %v", got))))
	}
	if want := []string{"a1", "a2", "none", "b1", "none"}; !slices.Equal(got, want) {
		t.Errorf("observer saw %v, want %v", got, want)
	}
	for _, k := range []string{name, layout.Prefixed(layout.ElectionPrefix, name)} {
		if exists(t, rdb, k) {
			t.Errorf("%s left after Resign", k)
		}
	}
}
