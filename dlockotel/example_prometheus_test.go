package dlockotel_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Export a Client's lock metrics to Prometheus through the OpenTelemetry
// Prometheus exporter, and scrape them as Prometheus would.
func Example_prometheus() {
	ctx := context.Background()

	// The application's metrics pipeline: an OTel MeterProvider whose
	// reader is the Prometheus exporter, registered in a registry that
	// /metrics serves.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)

	// The dlock Client, instrumented.
	inst, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithoutTraces())
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	client, err := dlock.New(rdb, dlock.WithObserver(inst.Observer()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	orders, err := client.NewMutex("example:orders")
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		lockCtx, err := orders.Lock(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// ... the critical section ...
		if err := orders.Unlock(lockCtx); err != nil {
			log.Fatal(err)
		}
	}

	// Scrape /metrics.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"dlock_lock_acquisitions_total{", "dlock_lock_holds{", "dlock_lock_hold_duration_seconds_count{"} {
			if strings.HasPrefix(line, name) {
				fmt.Println(withoutScope(line))
			}
		}
	}
	// Output:
	// dlock_lock_acquisitions_total{dlock_lock_kind="mutex",dlock_lock_reentrant="false"} 3
	// dlock_lock_hold_duration_seconds_count{dlock_lock_kind="mutex",dlock_lock_outcome="released",dlock_lock_reentrant="false"} 3
	// dlock_lock_holds{dlock_lock_kind="mutex"} 0
}

// withoutScope drops the otel_scope_* labels, whose version changes with
// the OpenTelemetry release.
func withoutScope(line string) string {
	open, end := strings.Index(line, "{"), strings.LastIndex(line, "}")
	var keep []string
	for _, l := range strings.Split(line[open+1:end], ",") {
		if !strings.HasPrefix(l, "otel_scope_") {
			keep = append(keep, l)
		}
	}
	return line[:open+1] + strings.Join(keep, ",") + line[end:]
}
