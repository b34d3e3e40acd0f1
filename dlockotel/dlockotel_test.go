package dlockotel_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// setup returns a Client instrumented with a manual metric reader and a
// span recorder, closed with t.
type setup struct {
	client *dlock.Client
	rdb    *redis.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newSetup(t *testing.T, opts []dlockotel.Option, copts ...dlock.Option) *setup {
	t.Helper()
	s := &setup{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	inst, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(s.tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
	s.client, err = dlock.New(s.rdb, append(copts, dlock.WithObserver(inst.Observer()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.client.Close()
		_ = s.rdb.Close()
		_ = mp.Shutdown(context.Background())
		_ = s.tp.Shutdown(context.Background())
	})
	return s
}

// collect reads the metrics now.
func (s *setup) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// find returns the metric named name.
func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set has every attribute of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum adds the points of counter or up-down counter name whose attributes
// include want.
func sum(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	m, _ := find(rm, name)
	data, _ := m.Data.(metricdata.Sum[int64])
	var n int64
	for _, p := range data.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histogram returns the count and sum of histogram name's points whose
// attributes include want.
func histogram(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (uint64, float64) {
	m, _ := find(rm, name)
	data, _ := m.Data.(metricdata.Histogram[float64])
	var n uint64
	var s float64
	for _, p := range data.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Count
			s += p.Sum
		}
	}
	return n, s
}

// eventually polls cond until it holds or 10 s have passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// recv receives from ch, failing the test with what if nothing comes
// within timeout.
func recv[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
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

var (
	mutex    = dlockotel.AttrKind.String(dlock.KindMutex)
	acquired = dlockotel.AttrOutcome.String(string(dlock.OutcomeAcquired))
)

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil, dlock.WithWatchdogTimeout(300*time.Millisecond))
	name := "otel:" + t.Name()
	m, err := s.client.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := m.Lock(a) // re-entry
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		b, err := m.Lock(ctx)
		if err == nil {
			err = m.Unlock(b)
		}
		got <- err
	}()
	eventually(t, "a waiter and a renewal", func() bool {
		rm := s.collect(t)
		n, _ := histogram(rm, dlockotel.MetricRenewalDuration)
		return sum(rm, dlockotel.MetricWaiters, mutex) == 1 && n > 0
	})
	if n := sum(s.collect(t), dlockotel.MetricHolds, mutex); n != 1 {
		t.Errorf("holds while held: %d, want 1 (re-entries not counted)", n)
	}
	if err := m.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "the waiting Lock and its Unlock"); err != nil {
		t.Fatal(err)
	}
	// A fixed lease that runs out is lost.
	short, err := s.client.NewMutex(name+":short", dlock.WithLease(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lctx, err := short.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, lctx.Done(), 10*time.Second, "the lock context of a 30ms lease")

	rm := s.collect(t)
	checks := []struct {
		what      string
		got, want int64
	}{
		{"first acquisitions", sum(rm, dlockotel.MetricAcquisitions, mutex, dlockotel.AttrReentrant.Bool(false)), 3},
		{"re-entries", sum(rm, dlockotel.MetricAcquisitions, mutex, dlockotel.AttrReentrant.Bool(true)), 1},
		{"busy failures", sum(rm, dlockotel.MetricFailures, mutex, dlockotel.AttrOutcome.String("busy")), 1},
		{"failures", sum(rm, dlockotel.MetricFailures), 1},
		{"lost (expired)", sum(rm, dlockotel.MetricLost, mutex, dlockotel.AttrCause.String("expired")), 1},
		{"lost", sum(rm, dlockotel.MetricLost), 1},
		{"holds at the end", sum(rm, dlockotel.MetricHolds), 0},
		{"waiters at the end", sum(rm, dlockotel.MetricWaiters), 0},
		{"renewed", sum(rm, dlockotel.MetricRenewedLocks, dlockotel.AttrOutcome.String("ok")), -1},
	}
	for _, c := range checks {
		if c.want < 0 {
			if c.got < 1 {
				t.Errorf("%s: %d, want some", c.what, c.got)
			}
			continue
		}
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	if n, _ := histogram(rm, dlockotel.MetricWaitDuration, mutex, acquired); n != 4 {
		t.Errorf("wait durations of acquisitions: %d, want 4", n)
	}
	// Released: the re-entry, the first owner's hold, the second's (the
	// short lease was lost, not released).
	if n, total := histogram(rm, dlockotel.MetricHoldDuration, mutex, dlockotel.AttrOutcome.String("released")); n != 3 || total <= 0 {
		t.Errorf("hold durations: %d points summing %vs, want 3 > 0", n, total)
	}
	if m, ok := find(rm, dlockotel.MetricWaitDuration); !ok || m.Unit != "s" {
		t.Errorf("wait duration metric %+v, want unit s", m)
	}
	for _, m := range []string{dlockotel.MetricAcquisitions, dlockotel.MetricHolds, dlockotel.MetricWaitDuration} {
		mm, _ := find(rm, m)
		var sets []attribute.Set
		switch d := mm.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		}
		for _, set := range sets {
			if set.HasValue(dlockotel.AttrName) {
				t.Errorf("%s carries the lock name by default: %v", m, set.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
}

func TestTraces(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil)
	name := "otel:" + t.Name()
	m, err := s.client.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	callerCtx, caller := s.tp.Tracer("test").Start(ctx, "caller")
	a, err := m.Lock(callerCtx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(callerCtx, 100*time.Millisecond)
	defer cancel()
	if _, err := m.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a held lock until its deadline: %v", err)
	}
	if err := m.Unlock(a); err != nil {
		t.Fatal(err)
	}
	caller.End()

	spans := s.spans.Ended()
	var locks []sdktrace.ReadOnlySpan
	var callerSpan sdktrace.ReadOnlySpan
	for _, sp := range spans {
		switch sp.Name() {
		case "dlock.Lock":
			locks = append(locks, sp)
		case "caller":
			callerSpan = sp
		}
	}
	if len(locks) != 2 || callerSpan == nil {
		t.Fatalf("spans %v, want 2 dlock.Lock and the caller", spans)
	}
	for _, sp := range locks {
		if sp.Parent().SpanID() != callerSpan.SpanContext().SpanID() {
			t.Errorf("span %s: parent %v, want the caller's span", sp.Name(), sp.Parent().SpanID())
		}
		if !hasAttr(sp.Attributes(), dlockotel.AttrName.String(name)) || !hasAttr(sp.Attributes(), mutex) {
			t.Errorf("span attributes %v, want the lock's name and kind", sp.Attributes())
		}
	}
	if !hasAttr(locks[0].Attributes(), acquired) {
		t.Errorf("first Lock's span: %v, want outcome acquired", locks[0].Attributes())
	}
	timedOut := locks[1]
	if !hasAttr(timedOut.Attributes(), dlockotel.AttrOutcome.String("timeout")) || timedOut.Status().Code.String() != "Error" {
		t.Errorf("timed-out Lock's span: %v %v, want outcome timeout and an error status", timedOut.Attributes(), timedOut.Status())
	}
	if ev := timedOut.Events(); len(ev) == 0 || ev[0].Name != "dlock.wait" || !hasAttr(ev[0].Attributes, dlockotel.AttrRound.Int(1)) {
		t.Errorf("timed-out Lock's events %v, want dlock.wait round 1 first", ev)
	}
	var unlockEvent bool
	for _, ev := range callerSpan.Events() {
		unlockEvent = unlockEvent || ev.Name == "dlock.unlock"
	}
	if !unlockEvent {
		t.Errorf("caller's span events %v, want dlock.unlock", callerSpan.Events())
	}
}

func TestLockNameModes(t *testing.T) {
	ctx := context.Background()
	name := "otel:user@example.com"
	sum := sha256.Sum256([]byte(name))
	hashed := hex.EncodeToString(sum[:8])
	for _, tc := range []struct {
		mode dlockotel.NameMode
		want string // "" when dropped
	}{{dlockotel.NameAsIs, name}, {dlockotel.NameHashed, hashed}, {dlockotel.NameDropped, ""}} {
		s := newSetup(t, []dlockotel.Option{dlockotel.WithLockName(tc.mode), dlockotel.WithMetricLockName(tc.mode)})
		m, err := s.client.NewMutex(name)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(l); err != nil {
			t.Fatal(err)
		}
		sp := s.spans.Ended()[0]
		v, ok := attrValue(sp.Attributes(), dlockotel.AttrName)
		if ok != (tc.want != "") || v != tc.want {
			t.Errorf("mode %d: span name attribute %q (%v), want %q", tc.mode, v, ok, tc.want)
		}
		rm := s.collect(t)
		if tc.want != "" && sum2(rm, dlockotel.AttrName.String(tc.want)) != 1 {
			t.Errorf("mode %d: no acquisition counted under name %q", tc.mode, tc.want)
		}
		if strings.Contains(string(sp.Name()), name) {
			t.Errorf("span name %q carries the lock name", sp.Name())
		}
	}
}

func sum2(rm metricdata.ResourceMetrics, kv attribute.KeyValue) int64 {
	return sum(rm, dlockotel.MetricAcquisitions, kv)
}

func hasAttr(attrs []attribute.KeyValue, kv attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == kv {
			return true
		}
	}
	return false
}

func attrValue(attrs []attribute.KeyValue, k attribute.Key) (string, bool) {
	for _, a := range attrs {
		if a.Key == k {
			return a.Value.AsString(), true
		}
	}
	return "", false
}

// TestLostAtUnlockAndReconnect: a lock deleted behind its holder's back
// (fixed lease: no watchdog to notice) is counted lost with cause unlock
// when Unlock finds it gone, and a killed pub/sub connection counts as a
// reconnect.
func TestLostAtUnlockAndReconnect(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil)
	name := "otel:" + t.Name()
	m, err := s.client.NewMutex(name, dlock.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter keeps a pub/sub connection open to be killed.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = m.Lock(wctx)
	}()
	channel := "redisson_lock__channel:{" + name + "}"
	eventually(t, "a subscribed waiter", func() bool {
		return s.rdb.PubSubNumSub(ctx, channel).Val()[channel] == 1
	})
	if n, err := s.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n == 0 {
		t.Fatalf("killing the pub/sub connection: %d, %v", n, err)
	}
	eventually(t, "a reconnect", func() bool { return sum(s.collect(t), dlockotel.MetricReconnects) >= 1 })
	cancel()
	recv(t, done, 10*time.Second, "the cancelled waiter's return")

	if err := s.rdb.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(l); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a deleted lock: %v", err)
	}
	rm := s.collect(t)
	if n := sum(rm, dlockotel.MetricLost, mutex, dlockotel.AttrCause.String(dlockotel.CauseUnlock)); n != 1 {
		t.Errorf("lost at unlock: %d, want 1", n)
	}
	if n, _ := histogram(rm, dlockotel.MetricHoldDuration, mutex, dlockotel.AttrOutcome.String(dlockotel.OutcomeNotHeld)); n != 1 {
		t.Errorf("hold durations with outcome not_held: %d, want 1", n)
	}
	if n := sum(rm, dlockotel.MetricHolds); n != 0 {
		t.Errorf("holds after the unlock: %d, want 0", n)
	}
	if n := sum(rm, dlockotel.MetricFailures, mutex, dlockotel.AttrOutcome.String("canceled")); n != 1 {
		t.Errorf("cancelled waits: %d, want 1", n)
	}
}

// TestRenewalFindsLost: a watchdog-renewed lock deleted behind its
// holder's back is counted, at the renewal that finds it gone, as a
// renewed hold with outcome lost and as a hold lost with cause rejected;
// the holds gauge goes back to 0.
func TestRenewalFindsLost(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil, dlock.WithWatchdogTimeout(300*time.Millisecond))
	name := "otel:" + t.Name()
	m, err := s.client.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lctx, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a renewal", func() bool {
		return sum(s.collect(t), dlockotel.MetricRenewedLocks, dlockotel.AttrOutcome.String(dlockotel.OutcomeOK)) >= 1
	})
	if err := s.rdb.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	recv(t, lctx.Done(), 10*time.Second, "the lock context of the deleted lock (watchdog 300ms)")
	rm := s.collect(t)
	if n := sum(rm, dlockotel.MetricRenewedLocks, dlockotel.AttrOutcome.String(dlockotel.OutcomeLost)); n != 1 {
		t.Errorf("renewed holds with outcome lost: %d, want 1", n)
	}
	if n := sum(rm, dlockotel.MetricLost, mutex, dlockotel.AttrCause.String(string(dlock.LostRejected))); n != 1 {
		t.Errorf("holds lost, cause rejected: %d, want 1", n)
	}
	if n := sum(rm, dlockotel.MetricHolds); n != 0 {
		t.Errorf("holds after the loss: %d, want 0", n)
	}
}

// spansNamed returns the ended spans called name.
func (s *setup) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.spans.Ended() {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// hasEvent reports whether sp has an event called name.
func hasEvent(sp sdktrace.ReadOnlySpan, name string) bool {
	for _, ev := range sp.Events() {
		if ev.Name == name {
			return true
		}
	}
	return false
}

// TestSemaphore: a Semaphore's Acquire is a wait and a hold of kind
// semaphore (a span dlock.Acquire, with a dlock.wait event when it slept),
// its Release ends the hold without a hold duration (not known), and a
// TryAcquire that gets nothing is a busy failure.
func TestSemaphore(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil)
	sem, err := s.client.NewSemaphore("otel:" + t.Name())
	if err != nil {
		t.Fatal(err)
	}
	kind := dlockotel.AttrKind.String(dlock.KindSemaphore)
	if _, err := sem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := sem.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if ok, err := sem.TryAcquire(ctx, 1); ok || err != nil {
		t.Fatalf("TryAcquire with no permit left: %v, %v", ok, err)
	}
	got := make(chan error, 1)
	go func() {
		err := sem.Acquire(ctx, 1)
		if err == nil {
			err = sem.Release(ctx, 1)
		}
		got <- err
	}()
	eventually(t, "a waiting Acquire", func() bool { return sum(s.collect(t), dlockotel.MetricWaiters, kind) == 1 })
	// A Semaphore's permits have no holder (any process may Release
	// them, Acquire(3) may be Released one by one): not counted as holds.
	if n := sum(s.collect(t), dlockotel.MetricHolds, kind); n != 0 {
		t.Errorf("holds while permits are taken: %d, want 0", n)
	}
	if err := sem.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "the waiting Acquire and its Release"); err != nil {
		t.Fatal(err)
	}

	rm := s.collect(t)
	checks := []struct {
		what      string
		got, want int64
	}{
		{"acquisitions", sum(rm, dlockotel.MetricAcquisitions, kind), 2},
		{"busy failures", sum(rm, dlockotel.MetricFailures, kind, dlockotel.AttrOutcome.String("busy")), 1},
		{"holds at the end", sum(rm, dlockotel.MetricHolds, kind), 0},
		{"waiters at the end", sum(rm, dlockotel.MetricWaiters, kind), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	if n, _ := histogram(rm, dlockotel.MetricWaitDuration, kind, acquired); n != 2 {
		t.Errorf("wait durations of acquisitions: %d, want 2", n)
	}
	if n, _ := histogram(rm, dlockotel.MetricHoldDuration, kind); n != 0 {
		t.Errorf("hold durations: %d, want none (a Semaphore's hold time is not known)", n)
	}
	spans := s.spansNamed("dlock.Acquire")
	if len(spans) != 2 || len(s.spansNamed("dlock.TryAcquire")) != 1 {
		t.Fatalf("spans %v, want 2 dlock.Acquire and 1 dlock.TryAcquire", s.spans.Ended())
	}
	for _, sp := range spans {
		if !hasAttr(sp.Attributes(), kind) || !hasAttr(sp.Attributes(), acquired) {
			t.Errorf("span attributes %v, want kind semaphore, outcome acquired", sp.Attributes())
		}
	}
	if !hasEvent(spans[1], "dlock.wait") {
		t.Errorf("waiting Acquire's events %v, want dlock.wait", spans[1].Events())
	}
}

// TestPermitSemaphore: a permit is a wait and a hold of kind permit, with
// a hold duration at Release, and a permit deleted behind its holder's
// back is counted lost (rejected) by the renewal that finds it gone.
func TestPermitSemaphore(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil, dlock.WithWatchdogTimeout(300*time.Millisecond))
	sem, err := s.client.NewPermitSemaphore("otel:" + t.Name())
	if err != nil {
		t.Fatal(err)
	}
	kind := dlockotel.AttrKind.String(dlock.KindPermit)
	if _, err := sem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p1, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type permit struct {
		ctx context.Context
		err error
	}
	got := make(chan permit, 1)
	go func() {
		p, err := sem.Acquire(ctx)
		got <- permit{p, err}
	}()
	eventually(t, "a waiting Acquire", func() bool { return sum(s.collect(t), dlockotel.MetricWaiters, kind) == 1 })
	if err := sem.Release(p1); err != nil {
		t.Fatal(err)
	}
	p2 := recv(t, got, 10*time.Second, "the waiting Acquire")
	if p2.err != nil {
		t.Fatal(p2.err)
	}
	if n := sum(s.collect(t), dlockotel.MetricHolds, kind); n != 1 {
		t.Errorf("holds while the second permit is held: %d, want 1", n)
	}
	if _, err := sem.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, p2.ctx.Done(), 10*time.Second, "the permit context of the deleted permit (watchdog 300ms)")

	rm := s.collect(t)
	checks := []struct {
		what      string
		got, want int64
	}{
		{"acquisitions", sum(rm, dlockotel.MetricAcquisitions, kind), 2},
		{"lost (rejected)", sum(rm, dlockotel.MetricLost, kind, dlockotel.AttrCause.String(string(dlock.LostRejected))), 1},
		{"holds at the end", sum(rm, dlockotel.MetricHolds, kind), 0},
		{"waiters at the end", sum(rm, dlockotel.MetricWaiters, kind), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	if n, total := histogram(rm, dlockotel.MetricHoldDuration, kind, dlockotel.AttrOutcome.String(dlockotel.OutcomeReleased)); n != 1 || total <= 0 {
		t.Errorf("hold durations: %d points summing %vs, want 1 > 0", n, total)
	}
	spans := s.spansNamed("dlock.Acquire")
	if len(spans) != 2 {
		t.Fatalf("spans %v, want 2 dlock.Acquire", s.spans.Ended())
	}
	if !hasAttr(spans[1].Attributes(), kind) || !hasEvent(spans[1], "dlock.wait") {
		t.Errorf("waiting Acquire's span: %v %v, want kind permit and a dlock.wait event", spans[1].Attributes(), spans[1].Events())
	}
}

// TestCountDownLatch: an Await is a wait of kind latch (outcome opened,
// span dlock.Await) with no hold after it: neither an acquisition nor a
// failure.
func TestCountDownLatch(t *testing.T) {
	ctx := context.Background()
	s := newSetup(t, nil)
	latch, err := s.client.NewCountDownLatch("otel:" + t.Name())
	if err != nil {
		t.Fatal(err)
	}
	kind := dlockotel.AttrKind.String(dlock.KindLatch)
	if _, err := latch.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- latch.Await(ctx) }()
	eventually(t, "a waiting Await", func() bool { return sum(s.collect(t), dlockotel.MetricWaiters, kind) == 1 })
	if _, err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second, "the Await of a latch counted down"); err != nil {
		t.Fatal(err)
	}

	rm := s.collect(t)
	opened := dlockotel.AttrOutcome.String(string(dlock.OutcomeOpened))
	if n, total := histogram(rm, dlockotel.MetricWaitDuration, kind, opened); n != 1 || total <= 0 {
		t.Errorf("wait durations, outcome opened: %d points summing %vs, want 1 > 0", n, total)
	}
	for _, m := range []string{dlockotel.MetricAcquisitions, dlockotel.MetricFailures, dlockotel.MetricHolds, dlockotel.MetricWaiters} {
		if n := sum(rm, m, kind); n != 0 {
			t.Errorf("%s: %d, want 0 (a wait, no hold)", m, n)
		}
	}
	spans := s.spansNamed("dlock.Await")
	if len(spans) != 1 {
		t.Fatalf("spans %v, want 1 dlock.Await", s.spans.Ended())
	}
	if sp := spans[0]; !hasAttr(sp.Attributes(), kind) || !hasAttr(sp.Attributes(), opened) || !hasEvent(sp, "dlock.wait") || sp.Status().Code.String() == "Error" {
		t.Errorf("Await's span: %v %v %v, want kind latch, outcome opened, a dlock.wait event, no error", sp.Attributes(), sp.Events(), sp.Status())
	}
}
