package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
)

// jobEnv carries a job to a worker process: the bench binary re-executes
// itself with the job in this variable.
const jobEnv = "DLOCKBENCH_JOB"

// job is one worker process's part of a scenario. Times are CLOCK_MONOTONIC
// nanoseconds (monoNow), shared by every process on the machine.
type job struct {
	Mode  string // "uncontended", "floor", "hot", "watchdog", "waiters", "redlock", "sem" or "many"
	Lib   string // a library's id; the floor scenario's: a layout's
	Addr  string
	Addrs []string // RedLock: the independent servers
	// Clients, each with Goroutines goroutines (hot lock), or Goroutines
	// in all.
	Clients, Goroutines int
	// Begin is when the goroutines start, T0 and T1 bound the measured
	// window; what happens before T0 is warm-up.
	Begin, T0, T1 int64
	// Hot lock: CPU-bound work while holding (a busy loop of PerIter ns
	// per iteration), sleep between acquisitions.
	Work, Think time.Duration
	PerIter     float64
	// Watchdog and waiter scale.
	Locks, Waiters int
	Renewal        time.Duration
	// Settle and Window: how long the watchdog and waiter-scale workers
	// let things settle, then measure.
	Settle, Window time.Duration
	// Permit semaphore (semaphore.go): permits, how long each is held,
	// wake-up samples, the pollers' interval and the wait before a
	// wake-up's release.
	Permits    int
	Hold, Poll time.Duration // many waiters: Hold is the holders' lease
	Samples    int
	Settle2    time.Duration // many waiters: the drain bound
	// Floor: the Lock+Unlock pairs measured.
	Pairs int
	// Profile, when set, is where the worker writes a CPU profile.
	Profile string
}

// runWorker runs the job in $DLOCKBENCH_JOB and writes its result to
// stdout as JSON.
func runWorker() error {
	var j job
	if err := json.Unmarshal([]byte(os.Getenv(jobEnv)), &j); err != nil {
		return fmt.Errorf("bench: worker job: %w", err)
	}
	if j.Profile != "" && j.Mode != "watchdog" { // the watchdog worker profiles its window
		f, err := os.Create(j.Profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if j.Mode == "redlock" {
		// Its libraries are configured for several servers (redLibs).
		res, err := redlockWorker(j)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	if j.Mode == "floor" {
		// Its rows are lock layouts (floorLayouts).
		res, err := floorWorker(j)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	if j.Mode == "many" {
		// Its lock kinds run on a cluster (manyLibs).
		res, err := manyWorker(j)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	if j.Mode == "sem" {
		// Its contenders are semaphores (semLibs).
		l, err := semLibByID(j.Lib)
		if err != nil {
			return err
		}
		res, err := semWorker(j, l)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	l, err := libByID(j.Lib)
	if err != nil {
		return err
	}
	var res any
	switch j.Mode {
	case "uncontended":
		res, err = uncontendedWorker(j, l)
	case "hot":
		res, err = hotWorker(j, l)
	case "watchdog":
		res, err = watchdogWorker(j, l)
	case "waiters":
		res, err = waitersWorker(j, l)
	default:
		err = fmt.Errorf("bench: unknown mode %q", j.Mode)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// timeout is how long the job may run before its worker counts as hung.
func (j job) timeout() time.Duration {
	d := time.Minute
	if j.T1 > 0 {
		d += time.Duration(j.T1 - monoNow())
	}
	if j.Mode == "many" {
		d += j.Settle2 // its drain bound
	}
	if j.Mode == "watchdog" { // taking and releasing the locks
		d += time.Duration(j.Locks)*200*time.Microsecond + unlockTimeout(j.Locks)
	}
	return d + 2*(j.Settle+j.Window) + drainTimeout
}

// hangPolicy is when a worker counts as hung and where the goroutine
// dump it prints when stopped is saved.
type hangPolicy struct {
	// after bounds every job's run; 0 leaves each job its own bound
	// (job.timeout).
	after time.Duration
	// dir receives the dumps; "" is the system's temporary directory.
	dir string
}

// bound is how long j may run before its worker counts as hung.
func (h hangPolicy) bound(j job) time.Duration {
	if h.after > 0 {
		return h.after
	}
	return j.timeout()
}

// hungError is a worker that gave no result within its bound: it was
// stopped with SIGQUIT, which makes the Go runtime print every
// goroutine's stack, and that dump was saved in Stacks.
type hungError struct {
	After  time.Duration
	Stacks string // the dump's file, or why there is none
}

func (e *hungError) Error() string {
	return fmt.Sprintf("hung: no result after %v (stopped with SIGQUIT; stacks in %s)", e.After.Round(time.Second), e.Stacks)
}

// killAfter is how long a worker stopped with SIGQUIT has to print its
// stacks before it is killed.
const killAfter = 30 * time.Second

// runJobs starts one worker process per job, waits for all of them and
// decodes each one's result into results[i] (pointers). A worker still
// running after h's bound is stopped (a *hungError).
func runJobs(h hangPolicy, jobs []job, results []any) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		w, err := startWorker(exe, j, h)
		if err != nil {
			return err
		}
		wg.Go(func() { errs[i] = w.wait(results[i]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// worker is a running worker process.
type worker struct {
	j        job
	h        hangPolicy
	bound    time.Duration
	cmd      *exec.Cmd
	out      bytes.Buffer // stdout: the result
	stderr   divertible
	timer    *time.Timer   // fires quit at the bound
	quitDone chan struct{} // closed when quit has run
	// Set by quit, read once quitDone is closed.
	hung *hungError
	kill *time.Timer
}

// startWorker starts the worker process for j.
func startWorker(exe string, j job, h hangPolicy) (*worker, error) {
	spec, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	w := &worker{j: j, h: h, bound: h.bound(j), quitDone: make(chan struct{})}
	w.stderr.w = os.Stderr
	w.cmd = exec.Command(exe)
	w.cmd.Env = append(os.Environ(), jobEnv+"="+string(spec))
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	w.timer = time.AfterFunc(w.bound, func() { defer close(w.quitDone); w.quit() })
	return w, nil
}

// quit diverts the worker's stderr, from now on its goroutine dump, to a
// file and stops it with SIGQUIT; one that has not exited killAfter later
// is killed.
func (w *worker) quit() {
	w.hung = &hungError{After: w.bound}
	f, err := os.CreateTemp(w.h.dir, fmt.Sprintf("dlockbench-%s-%s-*.stacks", w.j.Mode, w.j.Lib))
	if err != nil {
		w.hung.Stacks = "the bench's stderr (" + err.Error() + ")"
	} else {
		w.hung.Stacks = f.Name()
		w.stderr.divert(f)
	}
	_ = w.cmd.Process.Signal(syscall.SIGQUIT)
	w.kill = time.AfterFunc(killAfter, func() { _ = w.cmd.Process.Kill() })
}

// wait waits for the worker to exit and decodes its result into result.
// A worker that failed after its bound ran out is a *hungError; its
// dump's file is closed (and removed if the worker exited by itself
// after all).
func (w *worker) wait(result any) error {
	err := w.cmd.Wait()
	if !w.timer.Stop() {
		<-w.quitDone
		w.kill.Stop()
		w.stderr.close(err == nil)
		if err != nil {
			return fmt.Errorf("bench: %s worker (%s): %w", w.j.Mode, w.j.Lib, w.hung)
		}
	}
	if err != nil {
		return fmt.Errorf("bench: %s worker (%s): %w", w.j.Mode, w.j.Lib, err)
	}
	if err := json.Unmarshal(w.out.Bytes(), result); err != nil {
		return fmt.Errorf("bench: %s worker (%s) result: %w", w.j.Mode, w.j.Lib, err)
	}
	return nil
}

// divertible is a worker's stderr: the bench's own, until divert sends
// what follows to a file.
type divertible struct {
	mu sync.Mutex
	w  io.Writer
	f  *os.File // set by divert
}

func (d *divertible) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.w.Write(p)
}

func (d *divertible) divert(f *os.File) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.w, d.f = f, f
}

// close closes the file divert was given, if any, and removes it when
// remove is set.
func (d *divertible) close(remove bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return
	}
	_ = d.f.Close()
	if remove {
		_ = os.Remove(d.f.Name())
	}
}
