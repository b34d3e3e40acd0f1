package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/transport"
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

// queued returns how many scripts wait in c's batcher.
func queued(c *Client) int {
	_, n := c.tr.Batching()
	return n
}

// onWireNow returns how many batches c's batcher counts on the wire.
func onWireNow(c *Client) int {
	n, _ := c.tr.Batching()
	return n
}

// maxOnWire is how many batches a Client's batcher may have on the wire.
const maxOnWire = transport.MaxOnWire

// holdBatch makes c's batcher act as if it had batches on the wire, runs
// calls on their own goroutines, waits until each has queued its script,
// then lets the queue go out as one batch whose reply the proxy drops.
func holdBatch(t *testing.T, c *Client, proxy *redistest.Proxy, calls []func() error) []error {
	t.Helper()
	b := c.tr
	// A batch still counted on the wire (an earlier call's, whose caller
	// has its reply before the batcher counts it off) would lower the
	// count FillWire sets when it ends, and the calls would go out
	// directly instead of queueing.
	eventually(t, 5*time.Second, func() error {
		if n := onWireNow(c); n != 0 {
			return fmt.Errorf("%d batches still on the wire", n)
		}
		return nil
	})
	b.FillWire()
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
		if n := queued(c); n != len(calls) {
			return fmt.Errorf("%d of %d scripts queued", n, len(calls))
		}
		return nil
	})
	proxy.DropNextReply()
	b.PassOn() // the batch "on the wire" returns: the first queued sends
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("batched calls did not return")
	}
	b.UnfillWire()
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
		counterAboveClock(t, admin, ms[i].Name())
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
		if tok, _ := Token(lctxs[i]); tok != aboveClock+1 {
			t.Errorf("lock %d: token %d, want %d (one acquisition)", i, tok, aboveClock+1)
		}
		if n, err := admin.Get(ctx, prefixName(tokenPrefix, ms[i].Name())).Int64(); n != aboveClock+1 || err != nil {
			t.Errorf("lock %d: token counter %d, %v; want %d", i, n, err, aboveClock+1)
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
// waits for a batch on the wire returns at once with the context's error
// and is not sent; the others in the queue are.
func TestBatchedScriptGivenUp(t *testing.T) {
	rdb := newRedis(t)
	c := newClient(t, rdb)
	b := c.tr
	b.FillWire()

	key := lockName(t)
	gone, cancel := context.WithCancel(context.Background())
	live := redis.NewCmd(context.Background(), "set", key, "1")
	dead := redis.NewCmd(gone, "set", key+"-given-up", "1")
	liveDone, deadDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(liveDone); b.Process(context.Background(), live) }()
	go func() { defer close(deadDone); b.Process(gone, dead) }()
	eventually(t, 5*time.Second, func() error {
		if n := queued(c); n != 2 {
			return fmt.Errorf("%d of 2 queued", n)
		}
		return nil
	})
	cancel()
	select {
	case <-deadDone: // while the batches on the wire have not returned
	case <-time.After(5 * time.Second):
		t.Fatal("a caller that gave up still waits for the batch on the wire")
	}
	b.PassOn()
	select {
	case <-liveDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the live script was not sent")
	}
	b.UnfillWire()
	if n := onWireNow(c); n != 0 {
		t.Errorf("%d batches still counted on the wire", n)
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

// scriptsOn is a go-redis hook that announces each command naming one of
// keys.
type scriptsOn struct {
	keys []string
	sent chan struct{}
}

func (s *scriptsOn) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptsOn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *scriptsOn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if k, ok := a.(string); ok && slices.Contains(s.keys, k) {
				s.sent <- struct{}{}
				break
			}
		}
		return next(ctx, cmd)
	}
}

// TestClusterFrozenMasterHoldsUpNoOther: on a cluster, scripts stuck on a
// frozen master do not hold up a Lock on another master (a pipeline would
// wait for every node it touches, so a cluster Client does not batch).
func TestClusterFrozenMasterHoldsUpNoOther(t *testing.T) {
	cl := sharedCluster(t)
	tp := clusterTopology(t)
	ctx := context.Background()
	rdb := newClusterRedis(t, cl, 3*time.Second)
	base := topoName(t, tp)
	var stuck []string // names on one master, and one name elsewhere
	var healthy string
	frozen := cl.MasterFor(base + ":{0}")
	for i := 0; len(stuck) < maxOnWire || healthy == ""; i++ {
		name := fmt.Sprintf("%s:{%d}", base, i)
		if cl.MasterFor(name) != frozen {
			healthy = cmp.Or(healthy, name)
		} else if len(stuck) < maxOnWire {
			stuck = append(stuck, name)
		}
	}
	hook := &scriptsOn{keys: stuck, sent: make(chan struct{}, 16)}
	rdb.AddHook(hook)
	c := newClient(t, rdb)
	m := mustMutex(t, c, healthy)
	if err := m.Unlock(mustLock(t, ctx, m)); err != nil { // connect first
		t.Fatal(err)
	}

	frozen.Pause()
	resumed := sync.OnceFunc(frozen.Resume)
	t.Cleanup(func() { resumed(); _ = cl.WaitHealthy(ctx) })
	var wg sync.WaitGroup
	defer wg.Wait()
	defer resumed()
	for _, name := range stuck {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, _ = mustMutex(t, c, name).Lock(dctx)
		}()
	}
	for range stuck { // each stuck script is on its way to the frozen master
		select {
		case <-hook.sent:
		case <-time.After(5 * time.Second):
			t.Fatal("scripts not sent to the frozen master")
		}
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	lctx, err := m.Lock(dctx)
	if err != nil {
		t.Fatalf("Lock on a healthy master while another is frozen: %v", err)
	}
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
}

// panicky is a go-redis hook whose pipelines panic.
type panicky struct{}

func (panicky) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (panicky) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (panicky) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { panic("hook") }
}

// TestBatchPanicStrandsNoOne: when sending a batch panics (a go-redis
// hook), the panic reaches the sender, every other caller of the batch
// returns, and the batch no longer counts as on the wire.
func TestBatchPanicStrandsNoOne(t *testing.T) {
	rdb := newRedis(t)
	rdb.AddHook(panicky{})
	c := newClient(t, rdb)
	b := c.tr
	b.FillWire()
	recovered := make(chan any, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recovered <- recover() }()
			b.Process(context.Background(), redis.NewCmd(context.Background(), "ping", i))
		}()
	}
	eventually(t, 5*time.Second, func() error {
		if n := queued(c); n != 2 {
			return fmt.Errorf("%d of 2 queued", n)
		}
		return nil
	})
	b.PassOn()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a caller of the batch was left waiting")
	}
	close(recovered)
	panics := 0
	for r := range recovered {
		if r != nil {
			panics++
		}
	}
	if panics != 1 {
		t.Errorf("%d callers saw the panic, want 1 (the sender)", panics)
	}
	b.UnfillWire()
	if n := onWireNow(c); n != 0 {
		t.Errorf("%d batches still counted on the wire", n)
	}
}

// TestBatchSendsDeadlineScriptsAlone: with ContextTimeoutEnabled, a script
// whose ctx has a deadline goes out alone even when the batcher is full:
// in a batch it would run under the batch's latest deadline, or none, and
// could outlast its own.
func TestBatchSendsDeadlineScriptsAlone(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	b := c.tr
	b.FillWire()
	defer b.ClearWire()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := lockName(t)
	cmd := redis.NewCmd(ctx, "set", key, "1")
	done := make(chan struct{})
	go func() { defer close(done); b.Process(ctx, cmd) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.PassOn()
		t.Fatal("a script with a deadline waited for the batches on the wire")
	}
	if err := cmd.Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Del(context.Background(), key)
}

// scriptPipelines is a go-redis hook that records, for each pipeline that
// carries EVALSHA of the script hash, how many such commands it carries.
type scriptPipelines struct {
	hash  string
	mu    sync.Mutex
	sizes []int
}

func (p *scriptPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *scriptPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *scriptPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && c.Name() == "evalsha" && a[1] == p.hash {
				n++
			}
		}
		if n > 0 {
			p.mu.Lock()
			p.sizes = append(p.sizes, n)
			p.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// take returns the sizes recorded so far and forgets them.
func (p *scriptPipelines) take() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sizes
	p.sizes = nil
	return s
}

// TestBatchedScriptsKeepTheirErrors: a script that waits for a batch gets
// its own reply from the pipeline, errors included. 32 TryLocks of one
// Client on a key of the wrong type (a string), queued while the batcher
// is full and sent as one pipeline (the hook counts it), each return
// Redis's WRONGTYPE error, not an empty reply read as success or garbage.
func TestBatchedScriptsKeepTheirErrors(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	acquires := &scriptPipelines{hash: scripts.LockAcquire.Hash()}
	rdb.AddHook(acquires)
	// Each failed TryLock gives its attempt back in the background, which
	// fails too and logs it.
	c := newClient(t, rdb, WithLogger(slog.New(slog.DiscardHandler)))
	name := lockName(t)
	if err := rdb.Set(ctx, name, "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := mustMutex(t, c, name)
	// Alone first: the scripts get loaded, and the error is WRONGTYPE.
	if _, err := m.TryLock(ctx); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("TryLock alone on a string key: %v, want WRONGTYPE", err)
	}
	settleRecord(t, c)
	acquires.take()

	const n = 32
	b := c.tr
	// A batch still counted on the wire (an earlier call's, whose caller
	// has its reply before the batcher counts it off) would lower the
	// count FillWire sets when it ends, and the calls would go out
	// directly instead of queueing.
	eventually(t, 5*time.Second, func() error {
		if n := onWireNow(c); n != 0 {
			return fmt.Errorf("%d batches still on the wire", n)
		}
		return nil
	})
	b.FillWire()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.TryLock(ctx)
		}()
	}
	eventually(t, 10*time.Second, func() error {
		if q := queued(c); q != n {
			return fmt.Errorf("%d of %d TryLocks queued", q, n)
		}
		return nil
	})
	b.PassOn() // a batch "on the wire" returns: the first queued sends all
	awaitGroup(t, &wg, 10*time.Second, "the batched TryLocks returning")
	b.UnfillWire()

	if got := acquires.take(); !slices.Equal(got, []int{n}) {
		t.Errorf("pipelines of acquire scripts %v, want one carrying all %d", got, n)
	}
	wrong := 0
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			if wrong++; wrong <= 3 {
				t.Errorf("TryLock %d in the batch: %v, want WRONGTYPE", i, err)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d batched TryLocks lost their WRONGTYPE error", wrong, n)
	}
	if v, err := rdb.Get(ctx, name).Result(); v != "not a lock" || err != nil {
		t.Errorf("the string key is %q, %v; want it untouched", v, err)
	}
}

// onWire is a go-redis hook that tracks how many of the Client's lock
// scripts (the commands whose last argument counts their sends: those
// that go through the batcher, transport.Counted) are on the wire at once, counting a pipeline of
// them as one, and the most it saw.
type onWire struct {
	mu        sync.Mutex
	now, most int
	pipelines int // pipelines that carried more than one script
}

// scripts counts the batcher's scripts among cmds.
func (*onWire) scripts(cmds ...redis.Cmder) int {
	n := 0
	for _, c := range cmds {
		if transport.Counted(c) {
			n++
		}
	}
	return n
}

// track counts one batch on the wire while next runs.
func (w *onWire) track(batched bool, next func() error) error {
	w.mu.Lock()
	w.now++
	w.most = max(w.most, w.now)
	if batched {
		w.pipelines++
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.now--
		w.mu.Unlock()
	}()
	return next()
}

func (w *onWire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *onWire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if w.scripts(cmd) == 0 {
			return next(ctx, cmd)
		}
		return w.track(false, func() error { return next(ctx, cmd) })
	}
}
func (w *onWire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := w.scripts(cmds...)
		if n == 0 {
			return next(ctx, cmds)
		}
		return w.track(n > 1, func() error { return next(ctx, cmds) })
	}
}

// TestBatchAtMostTwoOnWire: however many goroutines of one Client lock and
// unlock at once, at most maxOnWire (2) batches or lone scripts of it are
// on the wire at a time; the others wait and go out together.
func TestBatchAtMostTwoOnWire(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	w := new(onWire)
	rdb.AddHook(w)
	c := newClient(t, rdb)
	name := lockName(t)
	const goroutines, rounds = 16, 30
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			m, err := c.NewMutex(fmt.Sprintf("%s-%d", name, g))
			for range rounds {
				var lctx context.Context
				if err == nil {
					lctx, err = m.Lock(ctx)
				}
				if err == nil {
					err = m.Unlock(lctx)
				}
			}
			errs <- err
		}()
	}
	for range goroutines {
		if err := recv(t, errs, 30*time.Second, "a goroutine's Lock/Unlock rounds"); err != nil {
			t.Fatal(err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.most > maxOnWire {
		t.Errorf("%d batches or lone scripts on the wire at once, want at most %d", w.most, maxOnWire)
	}
	// 16 goroutines with 2 places on the wire: the others queue.
	if w.pipelines == 0 {
		t.Errorf("no batch of several scripts in %d Lock/Unlock rounds of %d goroutines", goroutines*rounds, goroutines)
	}
	t.Logf("at most %d on the wire; %d batches of several scripts", w.most, w.pipelines)
}
