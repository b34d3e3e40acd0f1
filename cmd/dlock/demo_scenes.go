package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// demoWatchdog is the watchdog timeout of the demo's Clients: short, so
// that renewals and expiry happen while you watch.
const demoWatchdog = 1500 * time.Millisecond

// contention: three workers take turns on one lock. Each waiter is woken
// by its predecessor's unlock message; the timeline shows how long after
// the unlock it had the lock.
func (d *demo) contention(ctx context.Context) (string, error) {
	name := d.key("report")
	const workers, work = 3, 600 * time.Millisecond
	var (
		mu         sync.Mutex
		unlockedAt time.Time
		holder     string
		handoffs   []time.Duration
	)
	ms := make([]*dlock.Mutex, workers)
	for i := range ms {
		c, err := d.client(dlock.WithWatchdogTimeout(demoWatchdog))
		if err != nil {
			return "", err
		}
		if ms[i], err = c.NewMutex(name); err != nil {
			return "", err
		}
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i, m := range ms {
		who := fmt.Sprintf("worker-%d", i+1)
		mu.Lock()
		if holder != "" {
			d.tl.event(who, "wants it: %s holds it, so it waits", holder)
		}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			if unlockedAt.IsZero() {
				d.tl.event(who, "acquired %q", name)
			} else {
				h := time.Since(unlockedAt)
				handoffs = append(handoffs, h)
				d.tl.event(who, "acquired it, %s after the unlock: woken by the unlock message", millisText(h))
			}
			holder = who
			mu.Unlock()
			_ = pause(ctx, work)
			mu.Lock()
			d.tl.event(who, "done after %s of work; unlocks", secondsText(work))
			unlockedAt, holder = time.Now(), ""
			mu.Unlock()
			errs <- m.Unlock(lockCtx)
		}()
		// The next worker comes once this one holds the lock or waits for
		// it, so that they queue up in order.
		if err := waitFor(ctx, who+" holds or waits", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return holder != "" && (i == 0 || d.subscribers("redisson_lock__channel:{"+name+"}") >= int64(i))
		}); err != nil {
			return "", err
		}
	}
	wg.Wait()
	for range workers {
		if err := <-errs; err != nil {
			return "", err
		}
	}
	var total time.Duration
	for _, h := range handoffs {
		total += h
	}
	avg := total / time.Duration(max(len(handoffs), 1))
	return fmt.Sprintf("%d workers took turns on one lock; each waiter had it %s (average) after the unlock, woken by pub/sub rather than polling.", workers, millisText(avg)), nil
}

// watchdog: a job runs twice as long as its lease; the timeline shows
// every renewal, seen as the lock's TTL going back up.
func (d *demo) watchdog(ctx context.Context) (string, error) {
	name := d.key("nightly-job")
	const job = 3200 * time.Millisecond
	c, err := d.client(dlock.WithWatchdogTimeout(demoWatchdog))
	if err != nil {
		return "", err
	}
	m, err := c.NewMutex(name)
	if err != nil {
		return "", err
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		return "", err
	}
	d.tl.event("job", "acquired %q: lease %s, the job needs %s", name, secondsText(demoWatchdog), secondsText(job))

	renewals := 0
	prev := demoWatchdog
	end := time.Now().Add(job)
	for time.Now().Before(end) {
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
		ttl, err := d.rdb.PTTL(ctx, name).Result()
		if err != nil {
			return "", err
		}
		if ttl > prev+100*time.Millisecond {
			renewals++
			d.tl.event("watchdog", "renewed the lease: %s left -> %s", secondsText(prev), secondsText(ttl))
		}
		prev = ttl
	}
	if lockCtx.Err() != nil {
		return "", fmt.Errorf("the job lost its lock: %v", context.Cause(lockCtx))
	}
	d.tl.event("job", "finished after %s, still holding the lock; unlocks (the watchdog stops)", secondsText(job))
	if err := m.Unlock(lockCtx); err != nil {
		return "", err
	}
	return fmt.Sprintf("The watchdog renewed a %s lease %d times, so a %s job kept its lock to the end.", secondsText(demoWatchdog), renewals, secondsText(job)), nil
}

// crash: a holder's Client is closed without unlocking, as when its process
// dies; the waiting rescuer gets the lock when the lease runs out.
func (d *demo) crash(ctx context.Context) (string, error) {
	name := d.key("invoices")
	crasher, err := d.client(dlock.WithWatchdogTimeout(demoWatchdog))
	if err != nil {
		return "", err
	}
	rescuer, err := d.client(dlock.WithWatchdogTimeout(demoWatchdog))
	if err != nil {
		return "", err
	}
	cm, err := crasher.NewMutex(name)
	if err != nil {
		return "", err
	}
	rm, err := rescuer.NewMutex(name)
	if err != nil {
		return "", err
	}
	if _, err := cm.Lock(ctx); err != nil {
		return "", err
	}
	d.tl.event("crasher", "acquired %q (lease %s, renewed while it lives)", name, secondsText(demoWatchdog))

	type result struct {
		lockCtx context.Context
		err     error
	}
	got := make(chan result, 1)
	go func() {
		lockCtx, err := rm.Lock(ctx)
		got <- result{lockCtx, err}
	}()
	if err := waitFor(ctx, "the rescuer waits", func() bool { return d.subscribers("redisson_lock__channel:{"+name+"}") == 1 }); err != nil {
		return "", err
	}
	d.tl.event("rescuer", "wants it: crasher holds it, so it waits")
	if err := pause(ctx, 300*time.Millisecond); err != nil {
		return "", err
	}
	_ = crasher.Close()
	crashed := time.Now()
	ttl := d.rdb.PTTL(ctx, name).Val()
	d.tl.event("crasher", "CRASHES: no unlock, no more renewals; the lock has %s left", secondsText(ttl))
	r := <-got
	if r.err != nil {
		return "", r.err
	}
	took := time.Since(crashed)
	d.tl.event("rescuer", "acquired it, %s after the crash: the lease ran out", secondsText(took))
	if err := rm.Unlock(r.lockCtx); err != nil {
		return "", err
	}
	d.tl.event("rescuer", "unlocks")
	return fmt.Sprintf("A crashed holder's lock freed itself %s after the crash (at most one watchdog timeout); nobody had to unlock it.", secondsText(took)), nil
}

// fair: three waiters queue behind a fair lock's holder and get it in the
// order they came.
func (d *demo) fair(ctx context.Context) (string, error) {
	name := d.key("printer")
	const turn = 250 * time.Millisecond
	handles := make([]*dlock.FairMutex, 4)
	for i := range handles {
		c, err := d.client(dlock.WithWatchdogTimeout(demoWatchdog))
		if err != nil {
			return "", err
		}
		if handles[i], err = c.NewFairMutex(name); err != nil {
			return "", err
		}
	}
	first, err := handles[0].Lock(ctx)
	if err != nil {
		return "", err
	}
	d.tl.event("holder", "acquired the fair lock %q", name)

	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	errs := make(chan error, 3)
	queue := "redisson_lock_queue:{" + name + "}"
	for i, h := range handles[1:] {
		who := fmt.Sprintf("fair-%d", i+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lockCtx, err := h.Lock(ctx)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			order = append(order, who)
			d.tl.event(who, "acquired it (turn %d)", len(order))
			mu.Unlock()
			_ = pause(ctx, turn)
			errs <- h.Unlock(lockCtx)
		}()
		if err := waitFor(ctx, who+" queues", func() bool { return d.rdb.LLen(ctx, queue).Val() == int64(i+1) }); err != nil {
			return "", err
		}
		d.tl.event(who, "wants it: queues at position %d", i+1)
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
	d.tl.event("holder", "unlocks: the head of the queue is woken, and only it")
	if err := handles[0].Unlock(first); err != nil {
		return "", err
	}
	wg.Wait()
	for range 3 {
		if err := <-errs; err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("The fair lock served its waiters in the order they came: %s.", strings.Join(order, ", ")), nil
}

// readWrite: two readers hold a read-write lock together; a writer waits
// until both are gone, and a reader that comes meanwhile waits for the
// writer.
func (d *demo) readWrite(ctx context.Context) (string, error) {
	name := d.key("config")
	rws := make([]*dlock.RWMutex, 4)
	for i := range rws {
		c, err := d.client(dlock.WithWatchdogTimeout(demoWatchdog))
		if err != nil {
			return "", err
		}
		if rws[i], err = c.NewRWMutex(name); err != nil {
			return "", err
		}
	}
	r1, err := rws[0].ReadLock().Lock(ctx)
	if err != nil {
		return "", err
	}
	d.tl.event("reader-1", "acquired the read lock on %q", name)
	r2, err := rws[1].ReadLock().Lock(ctx)
	if err != nil {
		return "", err
	}
	d.tl.event("reader-2", "acquired the read lock too: two readers at once")

	channel := "redisson_rwlock:{" + name + "}"
	writer := make(chan error, 1)
	go func() {
		lockCtx, err := rws[2].WriteLock().Lock(ctx)
		if err != nil {
			writer <- err
			return
		}
		d.tl.event("writer", "acquired the write lock: the last reader left")
		_ = pause(ctx, 400*time.Millisecond)
		d.tl.event("writer", "unlocks: every waiting reader is woken")
		writer <- rws[2].WriteLock().Unlock(lockCtx)
	}()
	if err := waitFor(ctx, "the writer waits", func() bool { return d.subscribers(channel) == 1 }); err != nil {
		return "", err
	}
	d.tl.event("writer", "wants the write lock: waits for both readers")
	if err := pause(ctx, 300*time.Millisecond); err != nil {
		return "", err
	}
	d.tl.event("reader-1", "unlocks; reader-2 still reads, so the writer still waits")
	if err := rws[0].ReadLock().Unlock(r1); err != nil {
		return "", err
	}
	if err := pause(ctx, 300*time.Millisecond); err != nil {
		return "", err
	}
	d.tl.event("reader-2", "unlocks")
	if err := rws[1].ReadLock().Unlock(r2); err != nil {
		return "", err
	}
	if err := waitFor(ctx, "the writer holds", func() bool { return d.rdb.HGet(ctx, name, "mode").Val() == "write" }); err != nil {
		return "", err
	}
	reader3 := make(chan error, 1)
	go func() {
		lockCtx, err := rws[3].ReadLock().Lock(ctx)
		if err != nil {
			reader3 <- err
			return
		}
		d.tl.event("reader-3", "acquired the read lock after the writer")
		reader3 <- rws[3].ReadLock().Unlock(lockCtx)
	}()
	if err := waitFor(ctx, "reader-3 waits", func() bool { return d.subscribers(channel) == 1 }); err != nil {
		return "", err
	}
	d.tl.event("reader-3", "wants to read: the writer holds it, so it waits")
	if err := <-writer; err != nil {
		return "", err
	}
	if err := <-reader3; err != nil {
		return "", err
	}
	return "Two readers held the read-write lock at once; the writer waited for both, and a later reader for the writer.", nil
}

// subscribers is how many connections listen on channel: the waiting
// Clients. On a cluster dlock uses sharded pub/sub, counted per node.
func (d *demo) subscribers(channel string) int64 {
	ctx := context.Background()
	cc, ok := d.rdb.(*redis.ClusterClient)
	if !ok {
		return d.rdb.PubSubNumSub(ctx, channel).Val()[channel]
	}
	var n atomic.Int64
	_ = cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		n.Add(node.PubSubShardNumSub(ctx, channel).Val()[channel])
		return nil
	})
	return n.Load()
}
