package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
)

// contention: worker-1 holds a lock while worker-2 and worker-3 wait;
// each unlock hands it to the next at once.
func (d *demo) contention(ctx context.Context) error {
	const work = 400 * time.Millisecond
	ms := make([]*dlock.Mutex, 3)
	for i := range ms {
		var err error
		if ms[i], err = d.mutex("report"); err != nil {
			return err
		}
	}
	channel := layout.Prefixed(layout.LockChannelPrefix, ms[0].Name())
	var mu sync.Mutex
	var unlocked time.Time // when the last holder unlocked
	errs := make(chan error, len(ms))
	for i, m := range ms {
		who := fmt.Sprintf("worker-%d", i+1)
		go func() {
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				errs <- err
				return
			}
			if i == 0 {
				d.event(who, "acquired %q; works for %v", m.Name(), work)
			} else {
				mu.Lock()
				after := time.Since(unlocked)
				mu.Unlock()
				d.event(who, "acquired it %.1fms after the unlock, woken by the unlock message", float64(after.Microseconds())/1000)
			}
			_ = pause(ctx, work)
			d.event(who, "unlocks")
			mu.Lock()
			unlocked = time.Now()
			mu.Unlock()
			errs <- m.Unlock(lockCtx)
		}()
		// Workers come in order: each holds or waits before the next.
		if err := d.waiters(ctx, channel, int64(i)); err != nil {
			return err
		}
		if i == 0 {
			if err := waitUntil(ctx, "worker-1 holds", func() bool { l, _ := m.IsLocked(ctx); return l }); err != nil {
				return err
			}
		} else {
			d.event(who, "wants it: waits")
		}
	}
	for range ms {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// crash: a job holds a lock longer than its lease while the watchdog
// renews it; then its Client stops without unlocking, as when a process
// dies, and a waiting rescuer gets the lock when the lease runs out.
func (d *demo) crash(ctx context.Context) error {
	jobClient, err := d.client()
	if err != nil {
		return err
	}
	job, err := jobClient.NewMutex(d.prefix + "invoices")
	if err != nil {
		return err
	}
	rescuer, err := d.mutex("invoices")
	if err != nil {
		return err
	}
	if _, err := job.Lock(ctx); err != nil {
		return err
	}
	d.event("job", "acquired %q: lease %v, renewed every %v", job.Name(), demoWatchdog, demoWatchdog/3)
	got := make(chan error, 1)
	go func() {
		lockCtx, err := rescuer.Lock(ctx)
		if err == nil {
			d.event("rescuer", "acquired it: the crashed job's lease ran out; nobody had to unlock it")
			err = rescuer.Unlock(lockCtx)
		}
		got <- err
	}()
	if err := d.waiters(ctx, layout.Prefixed(layout.LockChannelPrefix, job.Name()), 1); err != nil {
		return err
	}
	d.event("rescuer", "wants it: waits")
	// Show two renewals: the lease left jumps back up.
	prev := demoWatchdog
	for renewals := 0; renewals < 2; {
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		ttl := d.rdb.PTTL(ctx, job.Name()).Val()
		if ttl > prev+100*time.Millisecond {
			renewals++
			d.event("watchdog", "renewed the job's lease: %.1fs left -> %.1fs", prev.Seconds(), ttl.Seconds())
		}
		prev = ttl
	}
	_ = jobClient.Close() // stops its watchdog; Close does not unlock
	d.event("job", "CRASHES: no unlock, no more renewals; %.1fs of lease left", d.rdb.PTTL(ctx, job.Name()).Val().Seconds())
	return <-got
}

// fair: three waiters queue behind a fair lock's holder and get it in the
// order they came.
func (d *demo) fair(ctx context.Context) error {
	fs := make([]*dlock.FairMutex, 4)
	for i := range fs {
		c, err := d.client()
		if err != nil {
			return err
		}
		if fs[i], err = c.NewFairMutex(d.prefix + "printer"); err != nil {
			return err
		}
	}
	name := fs[0].Name()
	first, err := fs[0].Lock(ctx)
	if err != nil {
		return err
	}
	d.event("holder", "acquired the fair lock %q", name)
	errs := make(chan error, 3)
	for i, f := range fs[1:] {
		who := fmt.Sprintf("fair-%d", i+1)
		go func() {
			lockCtx, err := f.Lock(ctx)
			if err == nil {
				d.event(who, "acquired it")
				_ = pause(ctx, 150*time.Millisecond)
				err = f.Unlock(lockCtx)
			}
			errs <- err
		}()
		queue := layout.Prefixed(layout.QueuePrefix, name)
		if err := waitUntil(ctx, who+" queues", func() bool { return d.rdb.LLen(ctx, queue).Val() == int64(i+1) }); err != nil {
			return err
		}
		d.event(who, "wants it: queues at position %d", i+1)
	}
	d.event("holder", "unlocks: only the head of the queue is woken")
	if err := fs[0].Unlock(first); err != nil {
		return err
	}
	for range 3 {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// readWrite: two readers hold a read-write lock together; a writer waits
// until both have left.
func (d *demo) readWrite(ctx context.Context) error {
	rws := make([]*dlock.RWMutex, 3)
	for i := range rws {
		c, err := d.client()
		if err != nil {
			return err
		}
		if rws[i], err = c.NewRWMutex(d.prefix + "config"); err != nil {
			return err
		}
	}
	readers := make([]context.Context, 2)
	for i := range readers {
		var err error
		if readers[i], err = rws[i].ReadLock().Lock(ctx); err != nil {
			return err
		}
		d.event(fmt.Sprintf("reader-%d", i+1), "acquired the read lock on %q", rws[i].ReadLock().Name())
	}
	got := make(chan error, 1)
	go func() {
		lockCtx, err := rws[2].WriteLock().Lock(ctx)
		if err == nil {
			d.event("writer", "acquired the write lock: the last reader left")
			err = rws[2].WriteLock().Unlock(lockCtx)
		}
		got <- err
	}()
	if err := d.waiters(ctx, layout.Prefixed(layout.RWChannelPrefix, rws[0].ReadLock().Name()), 1); err != nil {
		return err
	}
	d.event("writer", "wants the write lock: waits for both readers")
	for i, r := range readers {
		if err := pause(ctx, 300*time.Millisecond); err != nil {
			return err
		}
		d.event(fmt.Sprintf("reader-%d", i+1), "unlocks")
		if err := rws[i].ReadLock().Unlock(r); err != nil {
			return err
		}
	}
	return <-got
}
