package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

// startRedis starts a throwaway redis-server on a free loopback port,
// without persistence, and waits until it answers. The caller must Close it.
func startRedis() (*redisserver.Server, error) {
	return redisserver.Start(context.Background(), redisserver.Config{
		TempPrefix: "dlockbench-redis-",
		Args: func(dir string, port int) ([]string, error) {
			// Room for the waiter-scale scenario's polling clients.
			return redisserver.Args(dir, port, "--maxclients", "20000"), nil
		},
	})
}

// redisVersion returns the version redis-server reports.
func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "unknown"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

// serverStats is a sample of the server's counters.
type serverStats struct {
	calls map[string]int64 // INFO commandstats: calls per command
	cpu   time.Duration    // used_cpu_user + used_cpu_sys
}

// adminCommands are the commands the bench itself sends to sample the
// server; they are left out of every count.
var adminCommands = []string{"info", "client", "pubsub", "config", "hello", "command", "dbsize"}

// subscribeCommands are the pub/sub commands, sent on connections that
// the go-redis hook does not see.
var subscribeCommands = []string{"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "psubscribe", "punsubscribe"}

// sampleServer reads INFO commandstats and INFO cpu.
func sampleServer(ctx context.Context, rdb *redis.Client) (serverStats, error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverStats{}, fmt.Errorf("bench: INFO: %w", err)
	}
	st := serverStats{calls: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			cmd, stats, _ := strings.Cut(rest, ":")
			_, calls, _ := strings.Cut(stats, "calls=")
			calls, _, _ = strings.Cut(calls, ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			st.calls[cmd] = n
			continue
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				sec, _ := strconv.ParseFloat(v, 64)
				st.cpu += time.Duration(sec * float64(time.Second))
			}
		}
	}
	return st, nil
}

// steady is what a scenario measures over its window of steady load.
type steady struct {
	roundTrips int64         // the library's round trips
	clientCPU  time.Duration // this process's CPU time
	server     commandDelta  // what the server did
}

// measureSteady waits settle, then measures lk's round trips, this
// process's CPU and the server's commands over window.
func measureSteady(ctx context.Context, admin *redis.Client, lk locker, settle, window time.Duration) (steady, error) {
	time.Sleep(settle)
	s0, err := sampleServer(ctx, admin)
	if err != nil {
		return steady{}, err
	}
	cpu0, rt0 := cpuTime(), lk.roundTrips()
	time.Sleep(window)
	cpu1, rt1 := cpuTime(), lk.roundTrips()
	s1, err := sampleServer(ctx, admin)
	if err != nil {
		return steady{}, err
	}
	return steady{roundTrips: rt1 - rt0, clientCPU: cpu1 - cpu0, server: s1.delta(s0)}, nil
}

// sampleServers samples every server of admins and adds their counters
// up, as if they were one server.
func sampleServers(ctx context.Context, admins []*redis.Client) (serverStats, error) {
	sum := serverStats{calls: map[string]int64{}}
	for _, admin := range admins {
		st, err := sampleServer(ctx, admin)
		if err != nil {
			return serverStats{}, err
		}
		for cmd, n := range st.calls {
			sum.calls[cmd] += n
		}
		sum.cpu += st.cpu
	}
	return sum, nil
}

// commandDelta is what the server did between two samples.
type commandDelta struct {
	subscribes int64         // pub/sub (un)subscriptions
	total      int64         // every command executed, script-internal ones included
	pexpires   int64         // PEXPIRE calls: leases renewed, in the watchdog scenario
	cpu        time.Duration // server CPU time
}

// delta compares two samples, leaving out the bench's own commands.
func (b serverStats) delta(a serverStats) commandDelta {
	d := commandDelta{cpu: b.cpu - a.cpu}
	for cmd, n := range b.calls {
		if slices.Contains(adminCommands, cmd) {
			continue
		}
		n -= a.calls[cmd]
		d.total += n
		if cmd == "pexpire" {
			d.pexpires += n
		}
		if slices.Contains(subscribeCommands, cmd) {
			d.subscribes += n
		}
	}
	return d
}

// footprint is what a scenario left in Redis: DBSIZE and INFO memory
// used_memory, summed over its servers, sampled before the scenario
// started and after its worker processes exited (nothing is flushed).
type footprint struct {
	KeysBefore, KeysAfter int64
	MemBefore, MemAfter   int64
}

// Keys is the number of keys left; Mem the growth of used_memory.
func (f footprint) Keys() int64 { return f.KeysAfter - f.KeysBefore }
func (f footprint) Mem() int64  { return f.MemAfter - f.MemBefore }

// sampleFootprint returns DBSIZE and used_memory summed over addrs.
func sampleFootprint(addrs ...string) (keys, mem int64, err error) {
	ctx := context.Background()
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			_ = rdb.Close()
			return 0, 0, fmt.Errorf("bench: DBSIZE: %w", err)
		}
		info, err := rdb.Info(ctx, "memory").Result()
		_ = rdb.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("bench: INFO memory: %w", err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				m, _ := strconv.ParseInt(v, 10, 64)
				mem += m
			}
		}
		keys += n
	}
	return keys, mem, nil
}

// runOn runs jobs against the servers at addrs, stopping a worker that
// hangs as h says, and records what they leave in Redis.
func runOn(h hangPolicy, addrs []string, jobs []job, results []any) (footprint, error) {
	var f footprint
	var err error
	if f.KeysBefore, f.MemBefore, err = sampleFootprint(addrs...); err != nil {
		return f, err
	}
	if err := runJobs(h, jobs, results); err != nil {
		return f, err
	}
	f.KeysAfter, f.MemAfter, err = sampleFootprint(addrs...)
	return f, err
}

// connections counts the server's pub/sub connections (CLIENT LIST TYPE
// pubsub) and all its client connections (INFO clients), leaving out the
// bench's own sampling connection.
func connections(ctx context.Context, rdb *redis.Client) (pubsub, all int, err error) {
	list, err := rdb.Do(ctx, "client", "list", "type", "pubsub").Text()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: CLIENT LIST: %w", err)
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.TrimSpace(line) != "" {
			pubsub++
		}
	}
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: INFO clients: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			all, _ = strconv.Atoi(v)
		}
	}
	return pubsub, all - 1, nil
}
