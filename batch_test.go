package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// pipelineSizes is a go-redis hook that records how many commands each
// pipeline it sees carries.
type pipelineSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (p *pipelineSizes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipelineSizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelineSizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.mu.Lock()
		p.sizes = append(p.sizes, len(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (p *pipelineSizes) take() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sizes
	p.sizes = nil
	return s
}

// fill makes b act as if as many batches as it allows were on the wire,
// until the first of them is taken off by a passOn: the others never
// existed, so the test takes them off at its end.
func fill(b *batcher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onWire = maxOnWire
}

// unfill takes off what fill put on the wire beyond one batch.
func unfill(b *batcher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onWire -= maxOnWire - 1
}

// holdBatch makes c's batcher act as if it had batches on the wire, runs
// calls on their own goroutines, waits until each has queued its script,
// then lets the queue go out as one batch whose reply the proxy drops.
func holdBatch(t *testing.T, c *Client, proxy *redistest.Proxy, calls []func() error) []error {
	t.Helper()
	b := &c.batch
	fill(b)
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call()
		}()
	}
	eventually(t, 5*time.Second, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.queue) != len(calls) {
			return fmt.Errorf("%d of %d scripts queued", len(b.queue), len(calls))
		}
		return nil
	})
	proxy.DropNextReply()
	b.passOn() // the batch "on the wire" returns: the first queued sends
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("batched calls did not return")
	}
	unfill(b)
	return errs
}

// TestBatchedScriptsSurviveLostReply: scripts that goroutines of one
// Client issue while another batch is on the wire go out as one pipeline;
// when that pipeline's reply is lost, go-redis sends it again and neither
// the acquisitions nor the releases are applied twice: one fencing token
// each, every Unlock reports success, nothing is left in Redis.
func TestBatchedScriptsSurviveLostReply(t *testing.T) {
	ctx := context.Background()
	proxy, err := redistest.NewProxy(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 3})
	defer rdb.Close()
	sizes := new(pipelineSizes)
	rdb.AddHook(sizes)
	admin := newRedis(t)
	for _, s := range []*redis.Script{scripts.LockAcquire, scripts.LockRelease} {
		if err := s.Load(ctx, admin).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, rdb)
	settleRecord(t, c)
	// go-redis sends pipelines on a pool of their own: connect it before
	// the drops, so that the replies lost are the scripts', not HELLO's.
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}

	const n = 6
	ms := make([]*Mutex, n)
	lctxs := make([]context.Context, n)
	locks := make([]func() error, n)
	for i := range ms {
		ms[i] = mustMutex(t, c, fmt.Sprintf("%s-%d", lockName(t), i), WithFencing())
		locks[i] = func() (err error) {
			lctxs[i], err = ms[i].Lock(ctx)
			return err
		}
	}
	sizes.take()
	for i, err := range holdBatch(t, c, proxy, locks) {
		if err != nil {
			t.Fatalf("Lock %d: %v", i, err)
		}
		if tok, _ := Token(lctxs[i]); tok != 1 {
			t.Errorf("lock %d: token %d, want 1 (one acquisition)", i, tok)
		}
		if n, err := admin.Get(ctx, prefixName(tokenPrefix, ms[i].Name())).Int64(); n != 1 || err != nil {
			t.Errorf("lock %d: token counter %d, %v; want 1", i, n, err)
		}
	}
	if got := sizes.take(); len(got) == 0 || got[0] != n {
		t.Errorf("pipelines %v, want the first to carry all %d scripts", got, n)
	}

	unlocks := make([]func() error, n)
	for i := range ms {
		unlocks[i] = func() error { return ms[i].Unlock(lctxs[i]) }
	}
	for i, err := range holdBatch(t, c, proxy, unlocks) {
		if err != nil {
			t.Errorf("Unlock %d after a lost batch reply: %v", i, err)
		}
		if n, err := admin.Exists(ctx, ms[i].Name()).Result(); n != 0 || err != nil {
			t.Errorf("lock %d still there (%d, %v)", i, n, err)
		}
	}
	if proxy.Drops() != 2 {
		t.Errorf("proxy dropped %d replies, want 2", proxy.Drops())
	}
}

// TestBatchedScriptGivenUp: a script whose caller's context ends while it
// waits for the batch on the wire is not sent; the caller gets the
// context's error and the others in its batch their replies.
func TestBatchedScriptGivenUp(t *testing.T) {
	rdb := newRedis(t)
	c := newClient(t, rdb)
	b := &c.batch
	fill(b)

	key := lockName(t)
	gone, cancel := context.WithCancel(context.Background())
	live := redis.NewCmd(context.Background(), "set", key, "1")
	dead := redis.NewCmd(gone, "set", key+"-given-up", "1")
	var wg sync.WaitGroup
	for _, q := range []struct {
		ctx context.Context
		cmd *redis.Cmd
	}{{context.Background(), live}, {gone, dead}} {
		wg.Add(1)
		go func() { defer wg.Done(); b.process(q.ctx, q.cmd) }()
		eventually(t, 5*time.Second, func() error { // keep the queue's order
			b.mu.Lock()
			defer b.mu.Unlock()
			if q.cmd == live && len(b.queue) == 1 || q.cmd == dead && len(b.queue) == 2 {
				return nil
			}
			return errors.New("not queued yet")
		})
	}
	cancel()
	b.passOn()
	wg.Wait()
	unfill(b)
	if b.onWire != 0 {
		t.Errorf("%d batches still counted on the wire", b.onWire)
	}
	if err := live.Err(); err != nil {
		t.Errorf("live command: %v", err)
	}
	if err := dead.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("given-up command: %v, want context.Canceled", err)
	}
	if n, err := rdb.Exists(context.Background(), key+"-given-up").Result(); n != 0 || err != nil {
		t.Errorf("given-up command was sent (%d, %v)", n, err)
	}
	rdb.Del(context.Background(), key)
}
