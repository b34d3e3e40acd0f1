package dlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkLockUnlock is the uncontended cost of one Lock plus Unlock from
// one goroutine: with a context that cannot end, with one that has a
// deadline (as a request's context has), on a go-redis client with
// ContextTimeoutEnabled, with a fixed lease, and, for a reference in the
// same run, the two commands of a plain SET NX lock (bsm/redislock's SET
// NX PX and a compare-and-delete script). Besides the wall clock, which a
// loaded machine blurs, each reports the test process's CPU time and
// context switches per op (a goroutine hand-off across threads shows as
// about four more switches per op) and Redis commands per op.
func BenchmarkLockUnlock(b *testing.B) {
	run := func(b *testing.B, rdb redis.UniversalClient, newCtx func() (context.Context, context.CancelFunc), opts ...LockOption) {
		c := newClient(b, rdb)
		m := mustMutex(b, c, lockName(b), opts...)
		cmds := commandCount(b, c.rdb)
		b.ResetTimer()
		u0 := usage(b)
		for b.Loop() {
			ctx, cancel := newCtx()
			l, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(l); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
		b.StopTimer()
		usage(b).report(b, u0)
		b.ReportMetric(float64(commandCount(b, c.rdb)-cmds)/float64(b.N), "cmds/op")
	}
	background := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	deadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 5*time.Second)
	}
	b.Run("ctx=background", func(b *testing.B) { run(b, nil, background) })
	b.Run("ctx=deadline", func(b *testing.B) { run(b, nil, deadline) })
	b.Run("ctx=deadline/ContextTimeoutEnabled", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = rdb.Close() })
		run(b, rdb, deadline)
	})
	b.Run("ctx=deadline/lease", func(b *testing.B) { run(b, nil, deadline, WithLease(30*time.Second)) })
	b.Run("setnx", func(b *testing.B) {
		rdb := newRedis(b)
		key := lockName(b)
		del := redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
		u0 := usage(b)
		for b.Loop() {
			ctx, cancel := deadline()
			if ok, err := rdb.SetNX(ctx, key, "token", 30*time.Second).Result(); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := del.Run(ctx, rdb, []string{key}, "token").Err(); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
		b.StopTimer()
		usage(b).report(b, u0)
	})
}

// BenchmarkHandoff: 16 goroutines share one hot lock, each holding it for
// a short critical section (100 µs of CPU) and doing other work (a 1 ms
// sleep) between
// acquisitions. It reports the handoff latency (from the holder's Unlock
// call to the next holder's acquisition), the wait per acquisition, and
// Redis commands per acquisition.
func BenchmarkHandoff(b *testing.B) {
	for _, clients := range []int{1, 2} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchHandoff(b, clients, 16, func(tb testing.TB, c *Client, name string) Locker {
				return mustMutex(tb, c, name)
			})
		})
	}
}

// benchHandoff runs the handoff benchmark on the locks newLock makes, one
// per Client.
func benchHandoff(b *testing.B, clients, workers int, newLock func(tb testing.TB, c *Client, name string) Locker) {
	const critical, outside = 100 * time.Microsecond, time.Millisecond
	name := lockName(b)
	ms := make([]Locker, clients)
	for i := range ms {
		ms[i] = newLock(b, newClient(b, nil), name)
	}
	rdb := newRedis(b)
	cmds := commandCount(b, rdb)
	var (
		mu       sync.Mutex
		handoffs []time.Duration
		waits    []time.Duration
		released time.Time // set by the holder just before Unlock
		left     atomic.Int64
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(m Locker) {
			defer wg.Done()
			ctx := context.Background()
			for left.Add(-1) >= 0 {
				start := time.Now()
				l, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				mu.Lock()
				waits = append(waits, got.Sub(start))
				if !released.IsZero() && released.After(start) {
					handoffs = append(handoffs, got.Sub(released)) // we waited for that unlock
				}
				mu.Unlock()
				work(critical)
				mu.Lock()
				released = time.Now()
				mu.Unlock()
				if err := m.Unlock(l); err != nil {
					b.Error(err)
					return
				}
				time.Sleep(outside)
			}
		}(ms[w%clients])
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(commandCount(b, rdb)-cmds)/float64(b.N), "cmds/acq")
	report(b, "handoff", handoffs)
	report(b, "wait", waits)
}

// work stands for a critical section: it keeps the CPU busy for d.
// time.Sleep cannot stand in for it, since sleeps shorter than about a
// millisecond take a millisecond on Linux.
func work(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// report adds p50 and p99 of ds, in microseconds, to the benchmark output.
func report(b *testing.B, what string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), what+"-p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), what+"-p99-µs")
}

// clientCommands are the commands dlock sends. INFO commandstats also
// counts the commands a script calls, which are not round trips.
var clientCommands = []string{"evalsha", "eval", "subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "ping"}

// commandCount returns how many commands clients have sent the server
// (INFO commandstats, the commands in clientCommands).
// rusage is the process's CPU time and context switches so far.
type rusage struct {
	cpu      time.Duration
	switches int64
}

func usage(b testing.TB) rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return rusage{
		cpu:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		switches: ru.Nvcsw + ru.Nivcsw,
	}
}

// report reports the client's CPU time and its threads' context switches
// (futex sleeps and wake-ups, mostly: goroutine hand-offs across threads)
// per op since u0: what a loaded machine's wall clock hides.
func (u rusage) report(b *testing.B, u0 rusage) {
	n := float64(b.N)
	b.ReportMetric(float64(u.cpu-u0.cpu)/n/1e3, "cpu-µs/op")
	b.ReportMetric(float64(u.switches-u0.switches)/n, "csw/op")
}

func commandCount(b testing.TB, rdb redis.UniversalClient) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		cmd, _, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !strings.HasPrefix(line, "cmdstat_") || !slices.Contains(clientCommands, cmd) {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		total += v
	}
	return total
}
