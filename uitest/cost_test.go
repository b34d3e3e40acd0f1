package uitest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestConsoleCost measures what dlock ui costs Redis and how fast its
// page follows with DLOCK_UI_COST lock keys (docs/cli.md has the numbers
// for 100000): run with
//
//	DLOCK_UI_COST=100000 go test -run TestConsoleCost -v
//
// It fills a throwaway redis-server with held locks (a pipeline of HSET
// and PEXPIRE), measures Redis's CPU with no console for a baseline, then
// with the console sampling at its default interval and a page open, and
// how long a lock taken takes to show on the page.
func TestConsoleCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DLOCK_UI_COST"))
	if n <= 0 {
		t.Skip("set DLOCK_UI_COST=100000 to measure")
	}
	srv := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	fill(t, rdb, n)
	const window = 20 * time.Second
	pings := pingEvery(rdb, 10*time.Millisecond)
	idle := cpuOver(t, rdb, window)
	idleLat := pings()
	base := startConsoleOn(t, srv.Addr(), "1s")
	ctx := browser(t)
	ok(t, chromedp.Do(ctx, chromedp.Navigate(base+"/")))
	within(t, ctx, 2*time.Minute, "first sample", chromedp.WaitVisible(css(`tr[data-lock="cost:lock:000000"]`)))
	calls0 := totalCalls(t, rdb)
	pings = pingEvery(rdb, 10*time.Millisecond)
	busy := cpuOver(t, rdb, window)
	lat := pings()
	calls := totalCalls(t, rdb) - calls0
	var shown []time.Duration
	for i := range 3 {
		shown = append(shown, probeShown(t, ctx, rdb, fmt.Sprintf("a:probe:%d", i)))
	}
	scans := scanTimes(t, base, 5)
	t.Logf("%d lock keys: Redis CPU %.1f%% idle, %.1f%% with the console and one page (%.2f s of CPU per s over %v); %d commands per second",
		n, idle*100, busy*100, busy, window, int(float64(calls)/window.Seconds()))
	t.Logf("sample (scan) times: %v; a lock taken shows on the page after %v", scans, shown)
	t.Logf("another client's PING every 10ms: idle %s; with the console %s", latText(idleLat), latText(lat))
}

// latText summarises sorted round trips.
func latText(lat []time.Duration) string {
	if len(lat) == 0 {
		return "none"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", r(lat[len(lat)/2]), r(lat[len(lat)*99/100]), r(lat[len(lat)-1]))
}

// pingEvery PINGs Redis every interval, as another client of Redis
// would, until the returned func is called; that returns the round trips
// seen, sorted.
func pingEvery(rdb *redis.Client, interval time.Duration) func() []time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []time.Duration)
	go func() {
		var lat []time.Duration
		for ctx.Err() == nil {
			start := time.Now()
			if rdb.Ping(ctx).Err() == nil {
				lat = append(lat, time.Since(start))
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
		slices.Sort(lat)
		done <- lat
	}()
	return func() []time.Duration {
		cancel()
		return <-done
	}
}

// fill writes n held locks with a pipeline, 1000 a round trip.
func fill(t *testing.T, rdb *redis.Client, n int) {
	start := time.Now()
	ctx := context.Background()
	for from := 0; from < n; from += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < min(from+1000, n); i++ {
				name := fmt.Sprintf("cost:lock:%06d", i)
				owner := fmt.Sprintf("%08x-0000-4000-8000-000000000000:1", i)
				p.HSet(ctx, name, owner, 1)
				p.PExpire(ctx, name, time.Hour)
			}
			return nil
		})
		ok(t, err)
	}
	t.Logf("filled %d locks in %v", n, time.Since(start).Round(time.Millisecond))
}

// cpuOver measures Redis's CPU (used_cpu_sys + used_cpu_user) over d, as
// a fraction of one core.
func cpuOver(t *testing.T, rdb *redis.Client, d time.Duration) float64 {
	c0 := redisCPU(t, rdb)
	time.Sleep(d) // the measurement window
	return (redisCPU(t, rdb) - c0) / d.Seconds()
}

// infoField reads one numeric field of INFO section.
func infoField(t *testing.T, rdb *redis.Client, section, field string) float64 {
	info, err := rdb.Info(context.Background(), section).Result()
	ok(t, err)
	for line := range strings.Lines(info) {
		if v, found := strings.CutPrefix(strings.TrimSpace(line), field+":"); found {
			f, err := strconv.ParseFloat(v, 64)
			ok(t, err)
			return f
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

func redisCPU(t *testing.T, rdb *redis.Client) float64 {
	return infoField(t, rdb, "cpu", "used_cpu_sys") + infoField(t, rdb, "cpu", "used_cpu_user")
}

// totalCalls sums the calls of INFO commandstats.
func totalCalls(t *testing.T, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	ok(t, err)
	var total int64
	for line := range strings.Lines(info) {
		_, rest, found := strings.Cut(line, ":calls=")
		if !found {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
	}
	return total
}

// probeShown takes lock name and returns how long the page took to show
// it; the lock is deleted after.
func probeShown(t *testing.T, ctx context.Context, rdb *redis.Client, name string) time.Duration {
	ok(t, rdb.HSet(context.Background(), name, "00000000-0000-4000-8000-000000000001:1", 1).Err())
	start := time.Now()
	within(t, ctx, time.Minute, "probe shown", chromedp.WaitVisible(css(`tr[data-lock="`+name+`"]`)))
	took := time.Since(start)
	ok(t, rdb.Del(context.Background(), name).Err())
	return took.Round(10 * time.Millisecond)
}

// scanTimes reads scan_ms from /api/state at n successive samples.
func scanTimes(t *testing.T, base string, n int) []string {
	var out []string
	last := ""
	for len(out) < n {
		resp, err := http.Get(base + "/api/state?prefix=none")
		ok(t, err)
		var st struct {
			SampledAt string `json:"sampled_at"`
			ScanMS    int64  `json:"scan_ms"`
		}
		ok(t, json.NewDecoder(resp.Body).Decode(&st))
		resp.Body.Close()
		if st.SampledAt != last {
			last = st.SampledAt
			out = append(out, fmt.Sprintf("%dms", st.ScanMS))
		}
		time.Sleep(100 * time.Millisecond) // polling a console we only read
	}
	return slices.Clip(out)
}
