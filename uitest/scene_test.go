package uitest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// scene is what the console shows in the browser test: a lock of every
// kind held by named Clients, fair waiters, permits, a leader and a
// deadlock cycle, all live in this process until the test ends.
type scene struct {
	t      *testing.T
	rdb    *redis.Client
	ctx    context.Context // ends with the test: the waits and holds end
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newScene sets the scene up on rdb; it is taken down when the test
// ends.
func newScene(t *testing.T, rdb *redis.Client) *scene {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scene{t: t, rdb: rdb, ctx: ctx, cancel: cancel}
	t.Cleanup(func() {
		cancel()
		s.wg.Wait()
	})
	s.locks()
	s.fairQueue()
	s.readers()
	s.permits()
	s.election()
	s.deadlock()
	s.churn()
	return s
}

// client is a Client labelled name, closed when the test ends.
func (s *scene) client(name string, opts ...dlock.Option) *dlock.Client {
	c, err := dlock.New(s.rdb, append([]dlock.Option{dlock.WithClientName(name)}, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// ok fails the test on err.
func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hold takes lock name with a Client labelled label and keeps it.
func (s *scene) hold(label, name string) {
	m, err := s.client(label).NewMutex(name)
	ok(s.t, err)
	_, err = m.Lock(s.ctx)
	ok(s.t, err)
}

// wait runs lock in the background until the scene ends.
func (s *scene) wait(lock func(context.Context) (context.Context, error), ctx context.Context) {
	s.wg.Go(func() { _, _ = lock(ctx) })
}

func (s *scene) locks() {
	s.hold("billing-api", "billing:account:42")
	s.hold("billing-api", "billing:invoice:2026-118")
	s.hold("catalog-sync", "catalog:import")
}

// fairQueue holds a fair lock with two Lock calls queued behind it.
func (s *scene) fairQueue() {
	const name = "shipping:label-printer"
	f, err := s.client("shipping-worker-1").NewFairMutex(name)
	ok(s.t, err)
	_, err = f.Lock(s.ctx)
	ok(s.t, err)
	for i, label := range []string{"shipping-worker-2", "shipping-worker-3"} {
		w, err := s.client(label).NewFairMutex(name)
		ok(s.t, err)
		s.wait(w.Lock, s.ctx)
		s.awaitQueue(name, int64(i+1)) // queued in this order
	}
}

// awaitQueue waits until the fair queue of name has want waiters.
func (s *scene) awaitQueue(name string, want int64) {
	for s.rdb.LLen(s.ctx, "redisson_lock_queue:{"+name+"}").Val() < want {
		if s.ctx.Err() != nil {
			return
		}
		s.rdb.Ping(s.ctx) // a round trip between polls
	}
}

// readers hold a read-write lock in read mode, twice.
func (s *scene) readers() {
	for _, label := range []string{"report-reader-a", "report-reader-b"} {
		rw, err := s.client(label).NewRWMutex("orders:ledger")
		ok(s.t, err)
		_, err = rw.ReadLock().Lock(s.ctx)
		ok(s.t, err)
	}
}

// permits takes 2 of the 3 permits of a permit semaphore.
func (s *scene) permits() {
	sem, err := s.client("export-job").NewPermitSemaphore("reports:export")
	ok(s.t, err)
	_, err = sem.TrySetPermits(s.ctx, 3)
	ok(s.t, err)
	for range 2 {
		_, err = sem.Acquire(s.ctx)
		ok(s.t, err)
	}
}

func (s *scene) election() {
	e, err := s.client("scheduler-node-a").NewElection("scheduler")
	ok(s.t, err)
	_, err = e.Campaign(s.ctx, "node-a:8080")
	ok(s.t, err)
}

// churn has two workers take turns on a fair lock, each holding it for
// 400ms of work while the other waits in its queue, until the scene ends:
// acquisitions and waits for the charts.
func (s *scene) churn() {
	for _, label := range []string{"payout-worker-1", "payout-worker-2"} {
		f, err := s.client(label).NewFairMutex("billing:payout")
		ok(s.t, err)
		s.wg.Go(func() {
			for s.ctx.Err() == nil {
				lockCtx, err := f.Lock(s.ctx)
				if err != nil {
					return
				}
				select { // the work done under the lock
				case <-s.ctx.Done():
				case <-time.After(400 * time.Millisecond):
				}
				_ = f.Unlock(lockCtx)
			}
		})
	}
}

// deadlock: two Clients that record their waits each hold one lock and
// wait for the other's.
func (s *scene) deadlock() {
	a := s.client("inventory-api", dlock.WithDeadlockDetection(0))
	b := s.client("restock-job", dlock.WithDeadlockDetection(0))
	a1, err1 := a.NewMutex("inventory:sku-1")
	a2, err2 := a.NewMutex("inventory:sku-2")
	b1, err3 := b.NewMutex("inventory:sku-1")
	b2, err4 := b.NewMutex("inventory:sku-2")
	ok(s.t, errors.Join(err1, err2, err3, err4))
	heldA, err := a1.Lock(s.ctx)
	ok(s.t, err)
	heldB, err := b2.Lock(s.ctx)
	ok(s.t, err)
	s.wait(a2.Lock, heldA)
	s.wait(b1.Lock, heldB)
}
