// Package dlockotel reports a dlock Client's locks and synchronizers to
// OpenTelemetry: metrics (how long Lock waits and locks are held, by lock
// kind and outcome; acquisitions, failures, lost locks, renewal latency;
// how many locks are held and how many calls wait right now) and traces (a
// span per Lock or TryLock, a child of the caller's span, with an event per
// sleep). A Semaphore's or PermitSemaphore's Acquire and Release and a
// CountDownLatch's Await are reported as a lock's waits and holds, under
// their own kind (semaphore, permit, latch); a Semaphore's permits, which
// have no holder, are left out of the holds gauge.
//
// It is built on the OpenTelemetry API only: the application picks the SDK
// and the exporters (Prometheus, OTLP, ...) and passes its providers, or
// the global ones are used.
//
//	inst, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
//	...
//	client, err := dlock.New(rdb, dlock.WithObserver(inst.Observer()))
//
// One Instrumentation may serve several Clients. docs/observability.md in
// the dlock repository says what each metric means and how to read it.
package dlockotel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/dlock-go/dlock/dlockotel"

// Metric names, in OpenTelemetry's semantic-convention style: a dotted
// namespace, durations in seconds, counts with a {unit} annotation. Lock
// and Unlock stand for the synchronizers' calls too: Acquire, TryAcquire
// and Await, Release. A latch's Await is a wait (outcome opened) with no
// hold after it; a Semaphore's Release records no hold duration (its
// permits have no owner, so how long they were held is not known).
const (
	MetricWaitDuration    = "dlock.lock.wait.duration" // histogram, s: time in Lock or TryLock; kind, outcome
	MetricHoldDuration    = "dlock.lock.hold.duration" // histogram, s: time from a Lock's return to its Unlock; kind, reentrant, outcome
	MetricAcquisitions    = "dlock.lock.acquisitions"  // counter: successful Lock and TryLock calls; kind, reentrant
	MetricFailures        = "dlock.lock.failures"      // counter: Lock and TryLock calls that did not get the lock; kind, outcome
	MetricLost            = "dlock.lock.lost"          // counter: holds that ended without an Unlock; kind, cause
	MetricHolds           = "dlock.lock.holds"         // up-down counter: holds (not counting re-entries; permits of a PermitSemaphore, not of a Semaphore, which have no holder) held now; kind
	MetricWaiters         = "dlock.lock.waiters"       // up-down counter: Lock calls waiting now; kind
	MetricRenewalDuration = "dlock.renewal.duration"   // histogram, s: watchdog renewal call latency; outcome
	MetricRenewedLocks    = "dlock.renewal.locks"      // counter: holds renewed (or found lost) by the watchdog; outcome
	MetricReconnects      = "dlock.pubsub.reconnects"  // counter: pub/sub connections found broken and reopened
	metricUnitSeconds     = "s"
	spanLock, spanTryLock = "dlock.Lock", "dlock.TryLock" // span names (see spanName)
)

// Attribute keys.
const (
	AttrKind      = attribute.Key("dlock.lock.kind")       // mutex, fair, read, write, redlock, semaphore, permit, latch
	AttrName      = attribute.Key("dlock.lock.name")       // the lock's name, as set by WithLockName
	AttrOutcome   = attribute.Key("dlock.lock.outcome")    // see Outcome values below
	AttrReentrant = attribute.Key("dlock.lock.reentrant")  // the owner held the lock already
	AttrCause     = attribute.Key("dlock.lock.lost.cause") // expired, rejected, closed, unlock
	AttrRound     = attribute.Key("dlock.wait.round")      // span event: the sleep's number
	AttrHolderTTL = attribute.Key("dlock.wait.holder_ttl") // span event: seconds the holder's lease had left
	AttrRounds    = attribute.Key("dlock.wait.rounds")     // span: sleeps of the call
)

// Outcomes of a release (hold duration) and of a renewal call, beside
// dlock's Lock outcomes (acquired, opened, busy, timeout, canceled,
// closed, error).
const (
	OutcomeReleased = "released" // Unlock released the hold
	OutcomeNotHeld  = "not_held" // Redis no longer had the lock at Unlock: lost unnoticed
	OutcomeOK       = "ok"       // renewal: the call was answered
	OutcomeLost     = "lost"     // renewal: the hold was gone from Redis
	OutcomeError    = "error"    // release or renewal failed
	CauseUnlock     = "unlock"   // lost cause: found at Unlock (OutcomeNotHeld)
)

// NameMode says how a lock's name is recorded.
type NameMode int

const (
	// NameAsIs records the name as it is.
	NameAsIs NameMode = iota
	// NameHashed records the first 16 hex digits of the name's SHA-256:
	// names stay apart without being readable (user ids, paths).
	NameHashed
	// NameDropped leaves the name out.
	NameDropped
)

// Option configures New.
type Option func(*config)

type config struct {
	mp          metric.MeterProvider
	tp          trace.TracerProvider
	spanNames   NameMode
	metricNames NameMode
	attrs       []attribute.KeyValue
	buckets     []float64
	noTraces    bool
	noMetrics   bool
}

// WithMeterProvider sets the meter provider; the default is the global one.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the tracer provider; the default is the global
// one.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithLockName sets how spans record the lock's name (AttrName). The
// default is NameAsIs.
func WithLockName(m NameMode) Option { return func(c *config) { c.spanNames = m } }

// WithMetricLockName sets how metrics record the lock's name. The default
// is NameDropped: every lock name would be a time series of its own. Turn
// it on only for a small, fixed set of lock names.
func WithMetricLockName(m NameMode) Option { return func(c *config) { c.metricNames = m } }

// WithAttributes adds attributes to every metric point and span, such as
// the service's Redis deployment.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// WithDurationBuckets sets the bucket boundaries, in seconds, of the wait,
// hold and renewal histograms. The default, DefaultDurationBuckets, spans
// 1 ms to 5 min.
func WithDurationBuckets(b ...float64) Option { return func(c *config) { c.buckets = b } }

// WithoutTraces turns spans off.
func WithoutTraces() Option { return func(c *config) { c.noTraces = true } }

// WithoutMetrics turns metrics off.
func WithoutMetrics() Option { return func(c *config) { c.noMetrics = true } }

// DefaultDurationBuckets are the default histogram boundaries, in seconds:
// lock waits and holds run from a round trip to minutes.
var DefaultDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Instrumentation turns dlock events into OpenTelemetry metrics and
// spans. Make one with New and give Observer to dlock.New with
// dlock.WithObserver.
type Instrumentation struct {
	cfg    config
	tracer trace.Tracer

	wait, hold, renewal    metric.Float64Histogram
	acquired, failed, lost metric.Int64Counter
	renewed, reconnects    metric.Int64Counter
	holds, waiters         metric.Int64UpDownCounter
	metricsOff, tracesOff  bool
	common                 metric.MeasurementOption // cfg.attrs
	spanStartOpts          []trace.SpanStartOption
}

// New makes the instruments. It fails only when the meter refuses one.
func New(opts ...Option) (*Instrumentation, error) {
	cfg := config{metricNames: NameDropped, buckets: DefaultDurationBuckets}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	in := &Instrumentation{cfg: cfg, metricsOff: cfg.noMetrics, tracesOff: cfg.noTraces}
	in.common = metric.WithAttributeSet(attribute.NewSet(cfg.attrs...))
	in.tracer = cfg.tp.Tracer(ScopeName)
	in.spanStartOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(cfg.attrs...)}
	if in.metricsOff {
		return in, nil
	}
	m := cfg.mp.Meter(ScopeName)
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit(metricUnitSeconds),
			metric.WithExplicitBucketBoundaries(cfg.buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	updown := func(name, desc, unit string) metric.Int64UpDownCounter {
		c, err := m.Int64UpDownCounter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	in.wait = hist(MetricWaitDuration, "Time spent in Lock and TryLock (Acquire, TryAcquire, Await), by outcome.")
	in.hold = hist(MetricHoldDuration, "Time from a Lock's (Acquire's) return to its Unlock (Release).")
	in.renewal = hist(MetricRenewalDuration, "Latency of the watchdog's renewal calls.")
	in.acquired = counter(MetricAcquisitions, "Successful Lock and TryLock (Acquire, TryAcquire) calls.", "{acquisition}")
	in.failed = counter(MetricFailures, "Lock and TryLock (Acquire, TryAcquire, Await) calls that did not succeed.", "{call}")
	in.lost = counter(MetricLost, "Holds that ended without an Unlock.", "{hold}")
	in.renewed = counter(MetricRenewedLocks, "Holds the watchdog renewed or found lost.", "{hold}")
	in.reconnects = counter(MetricReconnects, "Pub/sub connections found broken and reopened.", "{reconnect}")
	in.holds = updown(MetricHolds, "Holds held now (re-entries not counted).", "{hold}")
	in.waiters = updown(MetricWaiters, "Lock (Acquire, Await) calls waiting now.", "{call}")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dlockotel: %w", err)
	}
	return in, nil
}

// Observer returns the hooks to give to dlock.WithObserver.
func (in *Instrumentation) Observer() dlock.Observer {
	return dlock.Observer{
		LockStart: in.lockStart,
		Wait:      in.waitRound,
		LockEnd:   in.lockEnd,
		Unlocked:  in.unlocked,
		Renewal:   in.renewalDone,
		Lost:      in.lostHold,
		Reconnect: in.reconnect,
	}
}

// name returns the attribute for a lock's name under mode m.
func name(m NameMode, n string) (attribute.KeyValue, bool) {
	switch m {
	case NameAsIs:
		return AttrName.String(n), true
	case NameHashed:
		sum := sha256.Sum256([]byte(n))
		return AttrName.String(hex.EncodeToString(sum[:8])), true
	}
	return attribute.KeyValue{}, false
}

// attrs returns the metric attributes kv plus the common ones and the
// lock's name, if metrics record it.
func (in *Instrumentation) attrs(lockName string, kv ...attribute.KeyValue) metric.MeasurementOption {
	if a, ok := name(in.cfg.metricNames, lockName); ok {
		kv = append(kv, a)
	}
	kv = append(kv, in.cfg.attrs...)
	return metric.WithAttributes(kv...)
}

func (in *Instrumentation) lockStart(ctx context.Context, l dlock.LockInfo) context.Context {
	if in.tracesOff {
		return nil
	}
	opts := append([]trace.SpanStartOption{}, in.spanStartOpts...)
	attrs := []attribute.KeyValue{AttrKind.String(l.Kind)}
	if a, ok := name(in.cfg.spanNames, l.Name); ok {
		attrs = append(attrs, a)
	}
	ctx, _ = in.tracer.Start(ctx, spanName(l), append(opts, trace.WithAttributes(attrs...))...)
	return ctx
}

// spanName names the span of the call l starts after its method:
// dlock.Lock and dlock.TryLock, dlock.Acquire and dlock.TryAcquire for the
// semaphores, dlock.Await for a latch.
func spanName(l dlock.LockInfo) string {
	switch {
	case l.Kind == dlock.KindLatch:
		return "dlock.Await"
	case l.Kind != dlock.KindSemaphore && l.Kind != dlock.KindPermit:
		if l.Try {
			return spanTryLock
		}
		return spanLock
	case l.Try:
		return "dlock.TryAcquire"
	}
	return "dlock.Acquire"
}

func (in *Instrumentation) waitRound(ctx context.Context, l dlock.LockInfo, w dlock.WaitInfo) {
	if w.Round == 1 && !in.metricsOff {
		in.waiters.Add(context.Background(), 1, in.attrs(l.Name, AttrKind.String(l.Kind)))
	}
	if in.tracesOff {
		return
	}
	trace.SpanFromContext(ctx).AddEvent("dlock.wait", trace.WithAttributes(
		AttrRound.Int(w.Round), AttrHolderTTL.Float64(w.HolderTTL.Seconds())))
}

func (in *Instrumentation) lockEnd(ctx context.Context, l dlock.LockInfo, e dlock.LockEnd) {
	if !in.metricsOff {
		bg := context.Background()
		kind := AttrKind.String(l.Kind)
		in.wait.Record(bg, e.Wait.Seconds(), in.attrs(l.Name, kind, AttrOutcome.String(string(e.Outcome))))
		switch e.Outcome {
		case dlock.OutcomeAcquired:
			in.acquired.Add(bg, 1, in.attrs(l.Name, kind, AttrReentrant.Bool(e.Reentry)))
			if !e.Reentry && l.Kind != dlock.KindSemaphore { // a Semaphore's permits have no holder
				in.holds.Add(bg, 1, in.attrs(l.Name, kind))
			}
		case dlock.OutcomeOpened: // a latch's Await: a wait, no hold
		default:
			in.failed.Add(bg, 1, in.attrs(l.Name, kind, AttrOutcome.String(string(e.Outcome))))
		}
		if e.Rounds > 0 {
			in.waiters.Add(bg, -1, in.attrs(l.Name, kind))
		}
	}
	if in.tracesOff {
		return
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrOutcome.String(string(e.Outcome)), AttrRounds.Int(e.Rounds), AttrReentrant.Bool(e.Reentry))
	switch e.Outcome {
	case dlock.OutcomeAcquired, dlock.OutcomeOpened, dlock.OutcomeBusy:
	case dlock.OutcomeError:
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	default: // timeout, canceled, closed: the caller's choice or shutdown
		span.SetStatus(codes.Error, string(e.Outcome))
	}
	span.End()
}

func (in *Instrumentation) unlocked(ctx context.Context, l dlock.LockInfo, u dlock.UnlockInfo) {
	outcome := OutcomeReleased
	switch {
	case errors.Is(u.Err, dlock.ErrNotHeld):
		outcome = OutcomeNotHeld
	case u.Err != nil:
		outcome = OutcomeError
	}
	if !in.metricsOff {
		bg := context.Background()
		kind := AttrKind.String(l.Kind)
		if u.Held >= 0 { // negative: not known (a Semaphore's Release)
			in.hold.Record(bg, u.Held.Seconds(), in.attrs(l.Name, kind, AttrReentrant.Bool(!u.Last), AttrOutcome.String(outcome)))
		}
		if u.Last && l.Kind != dlock.KindSemaphore {
			in.holds.Add(bg, -1, in.attrs(l.Name, kind))
		}
		if outcome == OutcomeNotHeld {
			in.lost.Add(bg, 1, in.attrs(l.Name, kind, AttrCause.String(CauseUnlock)))
		}
	}
	if in.tracesOff {
		return
	}
	// The lock context carries the span of the code that took the lock.
	attrs := []attribute.KeyValue{AttrKind.String(l.Kind), AttrOutcome.String(outcome),
		attribute.Float64("dlock.lock.held", u.Held.Seconds()), AttrReentrant.Bool(!u.Last)}
	if a, ok := name(in.cfg.spanNames, l.Name); ok {
		attrs = append(attrs, a)
	}
	trace.SpanFromContext(ctx).AddEvent("dlock.unlock", trace.WithAttributes(attrs...))
}

func (in *Instrumentation) renewalDone(r dlock.RenewalInfo) {
	if in.metricsOff {
		return
	}
	bg := context.Background()
	outcome := OutcomeOK
	if r.Err != nil {
		outcome = OutcomeError
	}
	in.renewal.Record(bg, r.Latency.Seconds(), metric.WithAttributes(append([]attribute.KeyValue{AttrOutcome.String(outcome)}, in.cfg.attrs...)...))
	switch {
	case r.Err != nil:
		in.renewed.Add(bg, int64(r.Locks), metric.WithAttributes(append([]attribute.KeyValue{AttrOutcome.String(OutcomeError)}, in.cfg.attrs...)...))
	default:
		in.renewed.Add(bg, int64(r.Locks-r.Lost), metric.WithAttributes(append([]attribute.KeyValue{AttrOutcome.String(OutcomeOK)}, in.cfg.attrs...)...))
		if r.Lost > 0 {
			in.renewed.Add(bg, int64(r.Lost), metric.WithAttributes(append([]attribute.KeyValue{AttrOutcome.String(OutcomeLost)}, in.cfg.attrs...)...))
		}
	}
}

func (in *Instrumentation) lostHold(l dlock.LockInfo, e dlock.LostInfo) {
	if in.metricsOff {
		return
	}
	bg := context.Background()
	kind := AttrKind.String(l.Kind)
	in.lost.Add(bg, 1, in.attrs(l.Name, kind, AttrCause.String(string(e.Cause))))
	in.holds.Add(bg, -1, in.attrs(l.Name, kind))
}

func (in *Instrumentation) reconnect(dlock.ReconnectInfo) {
	if in.metricsOff {
		return
	}
	in.reconnects.Add(context.Background(), 1, in.common)
}
