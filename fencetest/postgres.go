package fencetest

// This file starts a throwaway PostgreSQL, as internal/redistest starts
// redis-server: Debian's postgresql package (binaries under
// /usr/lib/postgresql/<version>/bin), a new cluster (initdb) in a temp
// dir, the server listening only on a Unix socket in that dir, stopped
// and removed by Close. PostgreSQL refuses to run as root, which CI is:
// then both run as the package's postgres user.
//
// A test or demo killed before Close (go test -timeout, SIGKILL) must not
// leave a server running: the server gets SIGQUIT (PostgreSQL's immediate
// shutdown) when the process that started it dies. Its dir, which nobody
// is left to remove, is removed by the next StartPostgres (sweep).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Postgres is a running throwaway PostgreSQL server.
type Postgres struct {
	dir  string
	cmd  *exec.Cmd
	done chan error // the server process's exit
	log  string

	closeOnce sync.Once
	closeErr  error
}

// ownerFile, in a server's dir, holds the pid of the process that
// started it; sweep removes the dirs whose owner is gone.
const ownerFile = "owner.pid"

// BinDir returns the newest /usr/lib/postgresql/<version>/bin that has
// initdb, or an error saying how to install it.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("fencetest: no PostgreSQL under /usr/lib/postgresql/*/bin: apt-get install postgresql (make test does)")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// StartPostgres initialises a cluster in a new temp dir and starts a
// server on a Unix socket there, waiting (bounded by ctx) until it
// accepts connections. Close stops it and removes the dir.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	sweep()
	dir, err := os.MkdirTemp("", "fencetest-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &Postgres{dir: dir, log: filepath.Join(dir, "postgres.log"), done: make(chan error, 1)}
	cred, err := runAs(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync",
		"-E", "UTF8", "--locale=C") // not the caller's LANG/LC_*, which may name a locale not installed
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("fencetest: initdb: %w\n%s", err, out)
	}
	logf, err := os.Create(p.log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-p", "5432",
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Pdeathsig is set after the credential change, so it holds for the
	// server running as postgres too.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if cred != nil {
		_ = os.Chown(p.log, int(cred.Uid), int(cred.Gid))
	}
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("fencetest: starting postgres: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	if err := p.waitReady(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// runAs returns the credential to run PostgreSQL with (nil: as this
// process) and gives dir to that user.
func runAs(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("fencetest: running as root, and no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// DSN is the connection string for database postgres as user postgres.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres sslmode=disable", p.dir)
}

// Open returns a database/sql handle on the server (driver pgx).
func (p *Postgres) Open() (*sql.DB, error) { return sql.Open("pgx", p.DSN()) }

func (p *Postgres) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := p.Open()
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case exit := <-p.done:
			p.done <- exit
			return fmt.Errorf("fencetest: postgres exited (%v): %s", exit, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("fencetest: postgres not ready: %w (last: %v): %s", ctx.Err(), err, p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *Postgres) logTail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// Close stops the server (a fast shutdown, then SIGKILL after 10 s) and
// removes its dir. Calls after the first return its result.
func (p *Postgres) Close() error {
	p.closeOnce.Do(func() {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
			}
		}
		p.closeErr = os.RemoveAll(p.dir)
	})
	return p.closeErr
}

// sweep removes the dirs of servers whose starting process died before
// Close: those whose owner pid is gone and whose server (postmaster.pid)
// is gone too. A dir without an owner file is left alone: it may be one
// being created.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "fencetest-pg-*"))
	for _, dir := range dirs {
		if owner := pidIn(filepath.Join(dir, ownerFile)); owner == 0 || alive(owner) {
			continue
		}
		if alive(pidIn(filepath.Join(dir, "data", "postmaster.pid"))) {
			continue // still shutting down; the next sweep takes it
		}
		_ = os.RemoveAll(dir)
	}
}

// pidIn returns the pid on the first line of file, 0 when there is none.
func pidIn(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// alive reports whether process pid exists and is not a zombie (a
// container's init may not reap the orphaned server).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}
