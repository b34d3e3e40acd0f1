// Command bench compares dlock's Mutex with the Go peers (go-redsync/redsync,
// bsm/redislock, rueidislock) on throwaway local redis-server processes and
// writes BENCHMARKS.md. Run it with `make bench` at the repository root.
//
// It lives in its own module so that the peers never enter dlock's
// go.mod. The program re-executes itself as worker processes (the job is
// passed in $DLOCKBENCH_JOB): every measurement runs in a fresh process
// against a fresh redis-server, and the hot-lock scenario runs several
// processes at once.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// config is one run's parameters.
type config struct {
	libs []lib

	// spawn is the time given to worker processes to start and connect;
	// warm is the warm-up before each measured window.
	spawn, warm time.Duration

	// Scenario 1.
	uncWindow time.Duration
	rounds    int
	// Scenarios 2 and 3.
	procs, perProc         int
	hold                   time.Duration
	outsideMin, outsideMax time.Duration
	hotWindow              time.Duration
	// Scenario 4.
	wdLocks   int
	wdRenewal time.Duration
	wdWindow  time.Duration
	// Scenario 5.
	waitLocks, waiters     int
	waitSettle, waitWindow time.Duration
	// Scenario 6.
	redLibs            []redLib
	redWarm, redWindow time.Duration
	redRounds          int

	profileDir string
}

func defaultConfig() config {
	return config{
		spawn: 700 * time.Millisecond, warm: time.Second,
		uncWindow: 2 * time.Second, rounds: 3,
		procs: 4, perProc: 16,
		hold: 200 * time.Microsecond, outsideMin: time.Millisecond, outsideMax: 2 * time.Millisecond,
		hotWindow: 8 * time.Second,
		wdLocks:   10000, wdRenewal: 3 * time.Second, wdWindow: 6 * time.Second,
		waitLocks: 1000, waiters: 10000, waitSettle: 2 * time.Second, waitWindow: 3 * time.Second,
		// 2 rounds × 2 server counts × 3 libraries × 2 concurrencies, about
		// 2.5 s each: about a minute.
		redWarm: 500 * time.Millisecond, redWindow: time.Second, redRounds: 2,
	}
}

func main() {
	if os.Getenv(jobEnv) != "" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	cfg := defaultConfig()
	out := flag.String("out", "", "write the report to this markdown file (BENCHMARKS.md)")
	png := flag.String("png", "", "write the wait-time plot to this PNG file")
	command := flag.String("command", "", "the command to record in the report (default: this program's command line)")
	scenarios := flag.String("scenarios", "1,2,4,5,6", "scenarios to run (3, fairness, comes with 2)")
	only := flag.String("libs", "", "comma-separated library ids to run (default: all; scenario 6 has dlock, dlock-watchdog and redsync)")
	quick := flag.Bool("quick", false, "short windows and small counts, to check that everything runs")
	flag.StringVar(&cfg.profileDir, "profile", "", "write a CPU profile of every worker process into this directory")
	rounds := flag.Int("rounds", 0, "rounds of scenario 1 (default 3)")
	uncWindow := flag.Duration("unc-window", 0, "measured window of each scenario 1 run (default 2s)")
	hotWindow := flag.Duration("hot-window", 0, "measured window of each scenario 2 run (default 8s)")
	redRounds := flag.Int("redlock-rounds", 0, "rounds of scenario 6 (default 2)")
	redWindow := flag.Duration("redlock-window", 0, "measured window of each scenario 6 run (default 1s)")
	flag.Parse()
	if *quick {
		cfg.uncWindow, cfg.rounds, cfg.hotWindow = 500*time.Millisecond, 1, 2*time.Second
		cfg.spawn, cfg.warm = 500*time.Millisecond, 300*time.Millisecond
		cfg.wdLocks, cfg.wdRenewal, cfg.wdWindow = 1000, time.Second, 2*time.Second
		cfg.waitLocks, cfg.waiters, cfg.waitSettle, cfg.waitWindow = 100, 1000, time.Second, time.Second
		cfg.redWarm, cfg.redWindow, cfg.redRounds = 300*time.Millisecond, 500*time.Millisecond, 1
	}
	if *rounds > 0 {
		cfg.rounds = *rounds
	}
	if *uncWindow > 0 {
		cfg.uncWindow = *uncWindow
	}
	if *hotWindow > 0 {
		cfg.hotWindow = *hotWindow
	}
	if *redRounds > 0 {
		cfg.redRounds = *redRounds
	}
	if *redWindow > 0 {
		cfg.redWindow = *redWindow
	}
	for _, l := range libs {
		if *only == "" || contains(strings.Split(*only, ","), l.id) {
			l, _ := libByID(l.id)
			cfg.libs = append(cfg.libs, l)
		}
	}
	for _, l := range redLibs {
		if *only == "" || contains(strings.Split(*only, ","), l.id) {
			cfg.redLibs = append(cfg.redLibs, l)
		}
	}
	if len(cfg.libs) == 0 && len(cfg.redLibs) == 0 {
		return fmt.Errorf("bench: no library matches -libs %q", *only)
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return err
		}
	}
	if *command == "" {
		*command = strings.Join(os.Args, " ")
	}
	rep := &report{cfg: cfg, command: *command, env: environment()}
	start := time.Now()
	if err := rep.runAll(strings.Split(*scenarios, ",")); err != nil {
		return err
	}
	rep.env.loadEnd = loadAverage()
	rep.env.elapsed = time.Since(start)
	if *png != "" {
		if err := plotWaits(*png, rep.hot); err != nil {
			return err
		}
		rep.png = *png
	}
	md := rep.markdown(*out)
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "wrote", *out)
	}
	return nil
}
