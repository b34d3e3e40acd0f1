// Command bench compares dlock with the Go peers (go-redsync/redsync,
// bsm/redislock, rueidislock) on throwaway local redis-server processes and
// writes the tables of BENCHMARKS.md. Run it with `make bench` at the
// repository root, or one scenario quickly with
//
//	go run . -only hot -duration 5s -rounds 1
//
// It lives in its own module so that the peers never enter dlock's
// go.mod. The program re-executes itself as worker processes (the job is
// passed in $DLOCKBENCH_JOB): every measurement runs in a fresh process
// against a fresh redis-server.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// config is one run's parameters.
type config struct {
	libs    []lib
	redLibs []redLib

	// spawn is the time given to worker processes to start and connect;
	// warm is the warm-up before each measured window.
	spawn, warm time.Duration

	// Uncontended.
	uncWindow time.Duration
	rounds    int
	// Redis cost of the lock layout (floor.go).
	floorPairs, floorRounds int
	// Hot lock: clients × perClient goroutines, work of CPU while
	// holding, think asleep between acquisitions.
	clients, perClient int
	work, think        time.Duration
	hotWindow          time.Duration
	hotRounds          int
	burner             burner
	// Watchdog scale.
	wdLocks     int
	wdRenewal   time.Duration
	wdWindow    time.Duration
	wdAcquirers int           // goroutines taking the locks
	wdSettle    time.Duration // after the locks are taken, before the window (0: wdRenewal)
	// Waiter scale.
	waitLocks, waiters     int
	waitSettle, waitWindow time.Duration
	// RedLock.
	redWarm, redWindow time.Duration
	redRounds          int

	// Permit semaphore (semaphore.go).
	sem semConfig
	// Many waiters on a cluster (many.go).
	many manyConfig
	// libIDs are the -libs flag's ids, nil for all.
	libIDs []string

	profileDir string
	// hang is when a worker counts as hung and where its stacks go.
	hang hangPolicy
}

func defaultConfig() config {
	return config{
		spawn: 700 * time.Millisecond, warm: time.Second,
		uncWindow: 2 * time.Second, rounds: 3,
		floorPairs: 20000, floorRounds: 3,
		clients: 4, perClient: 4, work: 200 * time.Microsecond, think: 2 * time.Millisecond,
		hotWindow: 6 * time.Second, hotRounds: 3, burner: newBurner(),
		wdLocks: 10000, wdRenewal: 3 * time.Second, wdWindow: 6 * time.Second, wdAcquirers: 64,
		waitLocks: 1000, waiters: 10000, waitSettle: 2 * time.Second, waitWindow: 3 * time.Second,
		redWarm: 500 * time.Millisecond, redWindow: time.Second, redRounds: 2,
		sem: defaultSemConfig(), many: defaultManyConfig(),
	}
}

// scenarios in the order they run and are reported, with the libraries
// each one runs.
var scenarios = []struct {
	name string
	libs []string
}{
	{"unc", []string{"dlock", "dlock-lease", "dlock-ctx", "dlock-rueidis", "redsync", "redislock-1ms", "rueidislock"}},
	{"floor", nil}, // floorLayouts, whatever -libs says
	{"hot", []string{"dlock", "dlock-lease", "dlock-ctx", "dlock-rueidis", "dlock-fair", "dlock-fair-rueidis", "dlock-spin", "dlock-deadlock", "redsync", "redislock-1ms", "redislock-10ms", "rueidislock"}},
	{"redlock", nil}, // redLibs
	{"watchdog", []string{"dlock", "redsync", "redislock-10ms", "rueidislock"}},
	{"waiters", []string{"dlock", "dlock-fair", "redsync", "redislock-10ms", "rueidislock"}},
	{"sem", nil},          // cfg.sem.libs
	{"waiters-many", nil}, // manyLibs; opt-in
}

// optIn are the scenarios that run only when -only names them: the
// many-waiters scenario takes minutes with 100 k waiters.
var optIn = []string{"waiters-many"}

func scenarioLibs(name string) []string {
	for _, s := range scenarios {
		if s.name == name {
			return s.libs
		}
	}
	return nil
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
	var names, defaults []string
	for _, s := range scenarios {
		names = append(names, s.name)
		if !slices.Contains(optIn, s.name) {
			defaults = append(defaults, s.name)
		}
	}
	out := flag.String("out", "", "splice the tables into this markdown file (BENCHMARKS.md) between its generated markers")
	png := flag.String("png", "", "write the hot-lock wait distribution to this PNG file")
	command := flag.String("command", "", "the command to record in the report (default: this program's command line)")
	only := flag.String("only", strings.Join(defaults, ","), "comma-separated scenarios to run: "+strings.Join(names, ", ")+" (waiters-many only when named)")
	libIDs := flag.String("libs", "", "comma-separated library ids to run (default: all; RedLock has dlock, dlock-watchdog and redsync; the floor scenario always runs its three layouts)")
	duration := flag.Duration("duration", 0, "measured window of every run (defaults: unc 2s, hot 6s, redlock 1s, watchdog 6s, waiters 3s, sem 4s)")
	rounds := flag.Int("rounds", 0, "rounds of the uncontended (default 3), floor (default 3), hot (default 3) and RedLock (default 2) scenarios")
	quick := flag.Bool("quick", false, "short windows and small counts, to check that everything runs")
	flag.IntVar(&cfg.many.waiters, "many-waiters", cfg.many.waiters, "waiters (one lock each) of the waiters-many scenario")
	wdLocks := flag.Int("wd-locks", 0, "locks held in the watchdog scenario (default 10000; the scale target: -wd-locks 1000000 -wd-lease 30s -libs dlock)")
	wdLease := flag.Duration("wd-lease", 0, "watchdog lease of the watchdog scenario, renewed every third of it (default 3s)")
	flag.DurationVar(&cfg.wdSettle, "wd-settle", 0, "watchdog scenario: wait after the locks are taken, before the window (default: one lease)")
	flag.DurationVar(&cfg.sem.think, "sem-think", cfg.sem.think, "permit semaphore: sleep between giving a permit back and asking for the next (default 2ms; 0: none)")
	flag.BoolVar(&cfg.sem.busy, "sem-busy", cfg.sem.busy, "permit semaphore: hold each permit with CPU-bound work (the hot lock's busy loop) instead of asleep")
	flag.StringVar(&cfg.profileDir, "profile", "", "write a CPU profile of every worker process into this directory")
	flag.StringVar(&cfg.hang.dir, "stacks", "", "directory for the goroutine dumps of workers stopped as hung (default: the system's temporary directory)")
	flag.Parse()
	if *quick {
		cfg.spawn, cfg.warm = 500*time.Millisecond, 300*time.Millisecond
		cfg.uncWindow, cfg.rounds, cfg.hotWindow, cfg.hotRounds = 500*time.Millisecond, 1, 2*time.Second, 1
		cfg.floorPairs, cfg.floorRounds = 2000, 1
		cfg.wdLocks, cfg.wdRenewal, cfg.wdWindow = 1000, time.Second, 2*time.Second
		cfg.waitLocks, cfg.waiters, cfg.waitSettle, cfg.waitWindow = 100, 1000, time.Second, time.Second
		cfg.redWarm, cfg.redWindow, cfg.redRounds = 300*time.Millisecond, 500*time.Millisecond, 1
		cfg.sem.quick()
		cfg.many.waiters, cfg.many.window = 2000, time.Second
	}
	if *wdLocks > 0 {
		cfg.wdLocks = *wdLocks
	}
	if *wdLease > 0 {
		cfg.wdRenewal = *wdLease
	}
	if *duration > 0 {
		cfg.uncWindow, cfg.hotWindow, cfg.redWindow = *duration, *duration, *duration
		cfg.wdWindow, cfg.waitWindow, cfg.sem.window, cfg.many.window = *duration, *duration, *duration, *duration
	}
	if *rounds > 0 {
		cfg.rounds, cfg.floorRounds, cfg.hotRounds, cfg.redRounds = *rounds, *rounds, *rounds, *rounds
	}
	want := strings.Split(*libIDs, ",")
	for _, l := range libs {
		if *libIDs == "" || slices.Contains(want, l.id) {
			l, _ := libByID(l.id)
			cfg.libs = append(cfg.libs, l)
		}
	}
	for _, l := range redLibs {
		if *libIDs == "" || slices.Contains(want, l.id) {
			cfg.redLibs = append(cfg.redLibs, l)
		}
	}
	if *libIDs != "" {
		cfg.libIDs = want
		cfg.sem.libs = slices.DeleteFunc(slices.Clone(cfg.sem.libs), func(l semLib) bool { return !slices.Contains(want, l.id) })
	}
	run := strings.Split(*only, ",")
	for _, s := range run {
		if !slices.Contains(names, s) {
			return fmt.Errorf("bench: unknown scenario %q (have %s)", s, strings.Join(names, ", "))
		}
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return err
		}
	}
	if *command == "" {
		*command = strings.Join(append([]string{"bench"}, os.Args[1:]...), " ")
	}
	rep := &report{cfg: cfg, command: *command, env: environment()}
	start := time.Now()
	rep.runAll(run)
	rep.env.loadEnd = loadAverage()
	rep.env.elapsed = time.Since(start)
	if *png != "" && len(rep.hot) > 0 {
		if err := plotWaits(*png, rep.hot); err != nil {
			progress("no plot: %v", err)
		} else {
			rep.png = *png
		}
	}
	md := rep.markdown(*out)
	fmt.Print(md)
	if *out != "" {
		old, err := os.ReadFile(*out)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.WriteFile(*out, []byte(splice(string(old), md)), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "wrote", *out)
	}
	return nil
}
