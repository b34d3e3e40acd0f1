package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// env describes the machine and the software measured.
type env struct {
	date               time.Time
	cpu, kernel        string
	cores              int
	goVersion, redis   string
	commit             string
	modules            []string // peer and go-redis module versions
	loadStart, loadEnd string
	elapsed            time.Duration
}

func environment() env {
	e := env{
		date:      time.Now().UTC(),
		cores:     runtime.NumCPU(),
		goVersion: runtime.Version(),
		redis:     redisVersion(),
		loadStart: loadAverage(),
		cpu:       "unknown",
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		e.commit = strings.TrimSpace(string(out))
		if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
			e.commit += " (with uncommitted changes)"
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/rueidis", "github.com/redis/go-redis/v9":
				e.modules = append(e.modules, d.Path+" "+d.Version)
			}
		}
	}
	return e
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// report collects every scenario's results and renders them.
type report struct {
	cfg     config
	command string
	run     []string // the scenarios run
	env     env
	png     string

	unc      map[int][]*uncontendedResult // by goroutines, in cfg.libs order
	floor    []*floorResult               // in floorLayouts order
	hot      []*hotResult
	watchdog []*watchdogResult
	waiters  []*waitersResult
	red      []*redlockResult // by servers, then goroutines, then library
	sem      []*semResult
	many     []*manyResult
}

// uncontendedGoroutines are the concurrencies of the uncontended and
// RedLock scenarios.
var uncontendedGoroutines = []int{1, 16}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// libsFor returns the configured libraries that scenario runs.
func (r *report) libsFor(scenario string) []lib {
	var ls []lib
	for _, l := range r.cfg.libs {
		if slices.Contains(scenarioLibs(scenario), l.id) {
			ls = append(ls, l)
		}
	}
	return ls
}

// failed logs a run that gave no result (its worker's stderr is already
// on stderr, a hung worker's stacks in their file) and returns why, for
// the run's row: the other runs go on.
func failed(err error) string {
	progress("FAILED: %v", err)
	if h, ok := errors.AsType[*hungError](err); ok {
		return h.Error()
	}
	return "run failed: " + err.Error()
}

// failedRound is failed for a run that is one of rounds rounds.
func failedRound(err error, round, rounds int) string {
	why := failed(err)
	if rounds > 1 {
		why = fmt.Sprintf("round %d: %s", round+1, why)
	}
	return why
}

func (r *report) runAll(run []string) {
	cfg := r.cfg
	r.run = run
	if slices.Contains(run, "unc") {
		ls := r.libsFor("unc")
		r.unc = map[int][]*uncontendedResult{}
		for _, g := range uncontendedGoroutines {
			r.unc[g] = make([]*uncontendedResult, len(ls))
		}
		for round := range cfg.rounds {
			order := slices.Clone(ls)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, l := range order {
				i := slices.IndexFunc(ls, func(x lib) bool { return x.id == l.id })
				for _, g := range uncontendedGoroutines {
					progress("uncontended  %-15s goroutines=%-2d round %d", l.id, g, round+1)
					res, err := runUncontended(cfg, l, g, round)
					if err != nil {
						res = &uncontendedResult{Lib: l.id, Goroutines: g, Failed: failedRound(err, round, cfg.rounds)}
					}
					r.unc[g][i] = keepBest(r.unc[g][i], res)
				}
			}
		}
	}
	if slices.Contains(run, "floor") {
		r.runFloors()
	}
	if slices.Contains(run, "hot") {
		ls := r.libsFor("hot")
		runs := make([][]*hotResult, len(ls))
		for round := range cfg.hotRounds {
			for k := range ls {
				i := k
				if round%2 == 1 {
					i = len(ls) - 1 - k
				}
				progress("hot lock     %-15s %d clients × %d goroutines, %v, round %d", ls[i].id, cfg.clients, cfg.perClient, cfg.hotWindow, round+1)
				res, err := runHot(cfg, ls[i])
				if err != nil {
					res = &hotResult{Lib: ls[i].id, Failed: failedRound(err, round, cfg.hotRounds)}
				}
				runs[i] = append(runs[i], res)
			}
		}
		for _, rs := range runs {
			r.hot = append(r.hot, medianHot(rs))
		}
	}
	if slices.Contains(run, "redlock") && len(cfg.redLibs) > 0 {
		r.runRedlocks()
	}
	if slices.Contains(run, "watchdog") {
		for _, l := range r.libsFor("watchdog") {
			progress("watchdog     %-15s %d locks", l.id, cfg.wdLocks)
			res, err := runWatchdog(cfg, l)
			if err != nil {
				res = &watchdogResult{Lib: l.id, Failed: failed(err)}
			}
			r.watchdog = append(r.watchdog, res)
		}
	}
	if slices.Contains(run, "waiters") {
		for _, l := range r.libsFor("waiters") {
			progress("waiters      %-15s %d waiters on %d locks", l.id, cfg.waiters, cfg.waitLocks)
			res, err := runWaiters(cfg, l)
			if err != nil {
				res = &waitersResult{Lib: l.id, Failed: failed(err)}
			}
			r.waiters = append(r.waiters, res)
		}
	}
	if slices.Contains(run, "sem") {
		r.runSems()
	}
	if slices.Contains(run, "waiters-many") {
		r.runManys()
	}
}

// medianHot returns the run with the median acquisitions/s (the lower
// of the two middle ones), every run's rate and the first failure of
// any in it.
func medianHot(rs []*hotResult) *hotResult {
	slices.SortFunc(rs, func(a, b *hotResult) int { return cmp.Compare(a.PerSec, b.PerSec) })
	m := rs[(len(rs)-1)/2]
	for _, x := range rs {
		m.Rounds = append(m.Rounds, x.PerSec)
		m.Failed = cmp.Or(m.Failed, x.Failed)
	}
	return m
}

// The generated part of BENCHMARKS.md lies between these markers; the
// rest of the file is kept as it is.
const (
	genStart = "<!-- generated:start -->"
	genEnd   = "<!-- generated:end -->"
)

// splice replaces the generated part of old with gen. Without markers in
// old, the result is a new file with only gen.
func splice(old, gen string) string {
	block := genStart + "\n" + gen + genEnd
	i, j := strings.Index(old, genStart), strings.Index(old, genEnd)
	if i < 0 || j < i {
		return "# Benchmarks\n\n" + block + "\n"
	}
	return old[:i] + block + old[j+len(genEnd):]
}

// textColumns are left-aligned; the others hold numbers.
var textColumns = []string{"configuration", "round trips counted by", "best peer"}

// table builds a markdown table.
type table struct {
	b    strings.Builder
	cols int
}

func newTable(head ...string) *table {
	t := &table{cols: len(head)}
	t.row(head...)
	seps := make([]string, len(head))
	for i := range seps {
		seps[i] = "--:"
	}
	seps[0] = "---"
	for i, h := range head {
		if slices.Contains(textColumns, h) {
			seps[i] = "---"
		}
	}
	t.row(seps...)
	return t
}

func (t *table) row(cells ...string) {
	t.b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

func (t *table) String() string { return t.b.String() }

// noResult adds the row of a run that gave no result: its first cell
// (libCell) and a dash in every other column.
func (t *table) noResult(first string) {
	cells := make([]string, t.cols)
	cells[0] = first
	for i := 1; i < len(cells); i++ {
		cells[i] = "–"
	}
	t.row(cells...)
}

// libCell is a row's first cell: the library, then why a run of it gave
// no result if one did (failure), then the errors its runs counted.
func libCell(lib, failure string, errs int, first string) string {
	if failure != "" {
		lib += " — " + strings.ReplaceAll(failure, "|", "/")
	}
	return lib + errNote(errs, first)
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

func errNote(n int, first string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d errors, first: %s)", n, strings.ReplaceAll(first, "|", "/"))
}

func isPeer(id string) bool { return !strings.HasPrefix(id, "dlock") }

// metric is one row of a comparison table: a value per library and
// whether lower is better.
type metric struct {
	name  string
	lower bool
	val   func(i int) float64
	show  func(v float64) string
}

// compare renders, for every metric, the best peer's value and each
// dlock variant's value over it.
func compare(ids []string, ms []metric) string {
	var dl []int
	for i, id := range ids {
		if !isPeer(id) {
			dl = append(dl, i)
		}
	}
	head := []string{"measure", "best peer"}
	for _, i := range dl {
		head = append(head, ids[i], ids[i]+" ÷ best peer")
	}
	t := newTable(head...)
	for _, m := range ms {
		best := -1
		for i, id := range ids {
			v := m.val(i)
			if !isPeer(id) || v != v { // NaN: not measured
				continue
			}
			if best < 0 || (m.lower && v < m.val(best)) || (!m.lower && v > m.val(best)) {
				best = i
			}
		}
		if best < 0 {
			continue
		}
		row := []string{m.name, fmt.Sprintf("%s (%s)", m.show(m.val(best)), ids[best])}
		for _, i := range dl {
			row = append(row, m.show(m.val(i)), ratio(m.val(i), m.val(best)))
		}
		t.row(row...)
	}
	return t.String()
}

// markdown renders the generated part of the report; out is where it
// will be written (for the plot's relative link).
func (r *report) markdown(out string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e := r.env
	w("Generated by `%s` on %s UTC in %v.\n\n", r.command, e.date.Format("2006-01-02 15:04"), e.elapsed.Round(time.Second))
	w("| | |\n|---|---|\n")
	w("| machine | %s, %d cores, %s |\n", e.cpu, e.cores, e.kernel)
	w("| load average (1/5/15 min) | %s at the start, %s at the end |\n", e.loadStart, e.loadEnd)
	w("| Go | %s |\n| Redis | %s |\n", e.goVersion, e.redis)
	w("| dlock | commit %s |\n", e.commit)
	w("| peers | %s |\n\n", strings.Join(e.modules, ", "))
	t := newTable("library", "configuration", "round trips counted by")
	rows := 0
	for _, l := range r.cfg.libs {
		if slices.ContainsFunc(r.run, func(s string) bool { return slices.Contains(scenarioLibs(s), l.id) }) {
			t.row(l.id, l.settings, l.hook)
			rows++
		}
	}
	if rows > 0 {
		w("%s\n", t)
	}
	r.writeUncontended(w)
	r.writeFloor(w)
	r.writeHot(w, out)
	r.writeRedlock(w)
	r.writeWatchdog(w)
	r.writeWaiters(w)
	r.writeSem(w)
	r.writeMany(w)
	return b.String()
}

type writer func(format string, args ...any)

// perOp prints a CPU time per operation.
func perOp(cpu time.Duration, ops float64) string { return fmtNs(cpuPer(cpu, ops)) }

func rounds(rs []float64) string {
	s := make([]string, len(rs))
	for i, v := range rs {
		s[i] = fmtRate(v)
	}
	return strings.Join(s, ", ")
}

func (r *report) writeUncontended(w writer) {
	if r.unc == nil {
		return
	}
	cfg := r.cfg
	w("## Uncontended Lock+Unlock\n\n")
	w("Distinct key per goroutine, one process; window %v after %v warm-up; best of %d rounds.\n\n", cfg.uncWindow, cfg.warm, cfg.rounds)
	for _, g := range uncontendedGoroutines {
		var us []*uncontendedResult
		for _, u := range r.unc[g] {
			if u != nil {
				us = append(us, u)
			}
		}
		t := newTable("library", "Lock+Unlock/s", "p50", "p99", "round trips/op", "(un)subscribes/op", "executed/op",
			"Redis CPU/op", "client CPU/op", "keys left", "memory left", "rounds (/s)")
		var ids []string
		var ok []*uncontendedResult // the rows with measurements, compared
		for _, u := range us {
			cell := libCell(u.Lib, u.Failed, u.Errors, u.FirstError)
			if u.Failed != "" && u.PerSec == 0 {
				t.noResult(cell)
				continue
			}
			if u.PerSec > 0 {
				ids, ok = append(ids, u.Lib), append(ok, u)
			}
			t.row(cell, fmtRate(u.PerSec), fmtDur(u.Latency.P50), fmtDur(u.Latency.P99),
				f2(u.RoundTrips), f2(u.Subscribes), f2(u.Executed), perOp(u.RedisCPU, u.ops()), perOp(u.ClientCPU, u.ops()),
				fmt.Sprint(u.Left.Keys()), fmtBytes(u.Left.Mem()), rounds(u.Rounds))
		}
		w("**%d goroutine(s)**\n\n%s\n", g, t)
		w("%s\n", compare(ids, []metric{
			{"Lock+Unlock/s", false, func(i int) float64 { return ok[i].PerSec }, fmtRate},
			{"p50", true, func(i int) float64 { return float64(ok[i].Latency.P50) }, fmtNs},
			{"Redis CPU/op", true, func(i int) float64 { return cpuPer(ok[i].RedisCPU, ok[i].ops()) }, fmtNs},
			{"round trips/op", true, func(i int) float64 { return ok[i].RoundTrips }, f2},
		}))
	}
}

// cpuPer is a CPU time per operation in ns, NaN without operations.
func cpuPer(cpu time.Duration, ops float64) float64 {
	if ops == 0 {
		return nan
	}
	return float64(cpu) / ops
}

// fmtNs prints nanoseconds, "–" for NaN.
func fmtNs(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmtDur(int64(v))
}

func (r *report) writeHot(w writer, out string) {
	if len(r.hot) == 0 {
		return
	}
	cfg := r.cfg
	w("## Hot lock\n\n")
	w("One lock, %d goroutines = %d Clients × %d (one worker process, each Client its own connection pool); critical section %v of CPU-bound work (busy loop of %d iterations, calibrated on the bench's process); %v sleep between acquisitions; window %v after %v warm-up; median of %d rounds by acquisitions/s.\n\n",
		cfg.clients*cfg.perClient, cfg.clients, cfg.perClient, cfg.work, int(float64(cfg.work)/cfg.burner.perIter), cfg.think, cfg.hotWindow, cfg.warm, cfg.hotRounds)
	t := newTable("library", "acquisitions/s", "wait p50", "wait p99", "wait max", "handoff p50", "hold mean",
		"round trips/acq", "(un)subscribes/acq", "executed/acq", "Redis CPU/acq", "client CPU/acq",
		"keys left", "memory left", "acq per goroutine", "overlaps", "rounds (acq/s)")
	var ids []string
	var hs []*hotResult // the rows with measurements, compared
	for _, h := range r.hot {
		cell := libCell(h.Lib, h.Failed, h.Errors, h.FirstError)
		if h.Failed != "" && h.Acq == 0 {
			t.noResult(cell)
			continue
		}
		if h.Acq > 0 {
			ids, hs = append(ids, h.Lib), append(hs, h)
		}
		acq := float64(h.Acq)
		t.row(cell, fmtRate(h.PerSec), fmtDur(h.Wait.P50), fmtDur(h.Wait.P99), fmtDur(h.MaxWait),
			fmtDur(h.Handoff.P50), fmtDur(h.HoldMean), f2(h.RoundTrips), f2(h.Subscribes), f2(h.Executed),
			perOp(h.RedisCPU, acq), perOp(h.ClientCPU, acq), fmt.Sprint(h.Left.Keys()), fmtBytes(h.Left.Mem()),
			fmt.Sprintf("%d–%d", h.MinPerG, h.MaxPerG), fmt.Sprint(h.Overlaps), rounds(h.Rounds))
	}
	w("%s\n", t)
	w("%s\n", compare(ids, []metric{
		{"acquisitions/s", false, func(i int) float64 { return hs[i].PerSec }, fmtRate},
		{"wait p99", true, func(i int) float64 { return float64(hs[i].Wait.P99) }, fmtNs},
		{"wait max", true, func(i int) float64 { return float64(hs[i].MaxWait) }, fmtNs},
		{"round trips/acq", true, func(i int) float64 { return hs[i].RoundTrips }, f2},
		{"Redis CPU/acq", true, func(i int) float64 { return cpuPer(hs[i].RedisCPU, float64(hs[i].Acq)) }, fmtNs},
	}))
	r.writeDeadlockNote(w)
	if r.png != "" {
		link := r.png
		if out != "" {
			dir, err1 := filepath.Abs(filepath.Dir(out))
			png, err2 := filepath.Abs(r.png)
			if rel, err := filepath.Rel(dir, png); err1 == nil && err2 == nil && err == nil {
				link = rel
			}
		}
		w("![hot-lock wait distribution](%s)\n\n", filepath.ToSlash(link))
	}
}

func (r *report) writeRedlock(w writer) {
	if len(r.red) == 0 {
		return
	}
	cfg := r.cfg
	w("## RedLock over 3 and 5 servers\n\n")
	w("Uncontended Lock+Unlock, distinct key per goroutine; window %v after %v warm-up; best of %d rounds; counts, CPU and what is left summed over the servers.\n\n",
		cfg.redWindow, cfg.redWarm, cfg.redRounds)
	t := newTable("library", "configuration")
	for _, l := range cfg.redLibs {
		t.row(l.id, l.settings)
	}
	w("%s\n", t)
	for _, n := range redNodeCounts {
		t := newTable("library", "goroutines", "Lock+Unlock/s", "p50", "p99", "round trips/op", "executed/op",
			"Redis CPU/op", "client CPU/op", "keys left", "memory left", "rounds (/s)", "/s ÷ redsync", "p50 ÷ redsync")
		rows := 0
		for _, g := range uncontendedGoroutines {
			var peer *redlockResult
			for _, x := range r.red {
				if x.Nodes == n && x.Goroutines == g && x.Lib == "redsync" {
					peer = x
				}
			}
			for _, x := range r.red {
				if x.Nodes != n || x.Goroutines != g {
					continue
				}
				rows++
				cell := libCell(x.Lib, x.Failed, x.Errors, x.FirstError)
				if x.Failed != "" && x.PerSec == 0 {
					t.noResult(cell)
					continue
				}
				qRate, qP50 := "–", "–"
				if peer != nil && x != peer {
					qRate, qP50 = ratio(x.PerSec, peer.PerSec), ratio(float64(x.Latency.P50), float64(peer.Latency.P50))
				}
				t.row(cell, fmt.Sprint(g), fmtRate(x.PerSec), fmtDur(x.Latency.P50), fmtDur(x.Latency.P99),
					f2(x.RoundTrips), f2(x.Executed), perOp(x.RedisCPU, x.ops()), perOp(x.ClientCPU, x.ops()),
					fmt.Sprint(x.Left.Keys()), fmtBytes(x.Left.Mem()), rounds(x.Rounds), qRate, qP50)
			}
		}
		if rows > 0 {
			w("**%d servers**\n\n%s\n", n, t)
		}
	}
}

func (r *report) writeWatchdog(w writer) {
	if len(r.watchdog) == 0 {
		return
	}
	cfg := r.cfg
	w("## Watchdog scale\n\n")
	w("%d locks taken by %d goroutines and held by one process; lease %v renewed every %v (peers without a watchdog: a refresh goroutine per lock); window %v after %v. "+
		"Lost: locks whose context ended with ErrLockLost by the local deadline / because a renewal found them gone (dlock). Client heap: HeapInuse after GC with every lock held, less before, per lock (the bench's names and handles included).\n\n",
		cfg.wdLocks, cfg.wdAcquirers, cfg.wdRenewal, cfg.wdRenewal/3, cfg.wdWindow, cmp.Or(cfg.wdSettle, cfg.wdRenewal))
	t := newTable("library", "held", "lost: deadline/gone", "round trips/s", "executed/s", "renewed/s", "client CPU", "Redis CPU", "Redis µs/renewal",
		"client heap/lock", "goroutines", "time to take all locks", "keys left", "memory left")
	for _, x := range r.watchdog {
		if x.Failed != "" {
			t.noResult(libCell(x.Lib, x.Failed, x.Errors, x.FirstError))
			continue
		}
		perRenewal := "–"
		if x.Renewed > 0 {
			perRenewal = fmt.Sprintf("%.2f", float64(x.RedisCPU.Microseconds())/float64(x.Renewed))
		}
		t.row(x.Lib+errNote(x.Errors, x.FirstError), fmt.Sprintf("%d/%d", x.Held, x.Locks), fmt.Sprintf("%d/%d", x.LostDeadline, x.LostGone),
			fmtRate(x.RenewPerSec), fmtRate(x.TotalPerSec), fmtRate(float64(x.Renewed)/x.Window.Seconds()),
			pct(x.ClientCPU, x.Window), pct(x.RedisCPU, x.Window), perRenewal, fmtBytes(int64(x.HeapPerLock)), fmt.Sprint(x.Goroutines),
			x.LockTime.Round(time.Millisecond).String(), fmt.Sprint(x.Left.Keys()), fmtBytes(x.Left.Mem()))
	}
	w("%s\n", t)
}

func (r *report) writeWaiters(w writer) {
	if len(r.waiters) == 0 {
		return
	}
	cfg := r.cfg
	w("## Waiter scale\n\n")
	w("%d goroutines in one process waiting on %d held locks; window %v after %v; then the locks are released (drain: until every waiter has had its lock once).\n\n",
		cfg.waiters, cfg.waitLocks, cfg.waitWindow, cfg.waitSettle)
	t := newTable("library", "pub/sub conns", "conns", "bytes/waiter", "goroutines/waiter", "round trips/s waiting", "executed/s",
		"Redis CPU", "client CPU", "drain", "early", "keys left", "memory left")
	for _, x := range r.waiters {
		if x.Failed != "" {
			t.noResult(libCell(x.Lib, x.Failed, x.Errors, x.FirstError))
			continue
		}
		drain := x.Drain.Round(time.Millisecond).String()
		if x.Drained < x.Waiters {
			drain = fmt.Sprintf("%d/%d in %v", x.Drained, x.Waiters, drainTimeout)
		}
		t.row(x.Lib+errNote(x.Errors, x.FirstError), fmt.Sprint(x.PubSubConns), fmt.Sprint(x.Conns), fmt.Sprintf("%.0f", x.BytesPerWaiter),
			f2(x.GoroutinesPerW), fmtRate(x.ClientPerSec), fmtRate(x.TotalPerSec), pct(x.RedisCPU, x.Window), pct(x.ClientCPU, x.Window),
			drain, fmt.Sprint(x.EarlyAcquired), fmt.Sprint(x.Left.Keys()), fmtBytes(x.Left.Mem()))
	}
	w("%s\n", t)
}
