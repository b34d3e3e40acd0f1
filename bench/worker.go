package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	Mode  string // "uncontended", "hot", "watchdog", "waiters", "redlock", "sem" or "many"
	Lib   string
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

// runJobs starts one worker process per job, waits for all of them and
// decodes each one's result into results[i] (pointers).
func runJobs(jobs []job, results []any) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		spec, err := json.Marshal(j)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), jobEnv+"="+string(spec))
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		// A worker that hangs is stopped with SIGQUIT, which makes the Go
		// runtime print every goroutine's stack to stderr.
		hung := time.AfterFunc(j.timeout(), func() { _ = cmd.Process.Signal(syscall.SIGQUIT) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer hung.Stop()
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("bench: %s worker (%s): %w", j.Mode, j.Lib, err)
				return
			}
			if err := json.Unmarshal(out.Bytes(), results[i]); err != nil {
				errs[i] = fmt.Errorf("bench: %s worker (%s) result: %w", j.Mode, j.Lib, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
