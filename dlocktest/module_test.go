package dlocktest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRealServer: with DLOCK_TEST_REDIS_URL set, the kit's Clients are on
// that server, and the helpers that need the embedded server skip the
// test that calls them, saying why.
func TestRealServer(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	real := redistest.NewServer(t)
	t.Setenv(dlocktest.EnvRedisURL, "redis://"+real.Addr())
	srv := dlocktest.NewServer(t)
	if srv.Embedded() || srv.Addr() != real.Addr() {
		t.Fatalf("the kit's server is %s (embedded %v), want the real one at %s", srv.Addr(), srv.Embedded(), real.Addr())
	}
	m, err := dlocktest.New(t).NewMutex("real")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Redis(t).Exists(t.Context(), "real").Result(); n != 1 || err != nil {
		t.Errorf("the lock is not on the real server: EXISTS = %d, %v", n, err)
	}
	if err := m.Unlock(lc); err != nil {
		t.Fatal(err)
	}
	for name, helper := range map[string]func(*dlocktest.Server){
		"FastForward": func(s *dlocktest.Server) { s.FastForward(1) },
		"Stop":        (*dlocktest.Server).Stop,
		"Restart":     (*dlocktest.Server).Restart,
	} {
		t.Run(name, func(t *testing.T) {
			var ran bool
			inner := t.Run("helper", func(t *testing.T) {
				helper(dlocktest.NewServer(t))
				ran = true
			})
			if ran || !inner {
				t.Errorf("%s on a real server did not skip the test", name)
			}
		})
	}
}

// TestLibraryHasNoMiniredis: a build that imports dlock (the library and
// the command) compiles no miniredis: only this module brings it.
func TestLibraryHasNoMiniredis(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/dlock-go/dlock").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "github.com/redis/go-redis/v9\n") {
		t.Fatalf("go list -deps lists no go-redis: the check reads the wrong output\n%s", out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "miniredis") || strings.Contains(dep, "gopher-lua") {
			t.Errorf("github.com/dlock-go/dlock depends on %s", dep)
		}
	}
}

// TestUserModule: a user's module, outside this workspace (GOWORK=off)
// and with no redis-server on PATH, tests its code with the kit: it
// takes a lock, waits for it, and loses it.
func TestUserModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module")
	}
	kit, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(kit)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", `module example.com/billing

go 1.26.0

require (
	github.com/dlock-go/dlock v0.1.0
	github.com/dlock-go/dlock/dlocktest v0.1.0
)

replace github.com/dlock-go/dlock v0.1.0 => `+root+`

replace github.com/dlock-go/dlock/dlocktest v0.1.0 => `+kit+`
`)
	var sums strings.Builder
	for _, f := range []string{filepath.Join(root, "go.sum"), filepath.Join(kit, "go.sum")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sums.Write(b)
	}
	write("go.sum", sums.String())
	write("billing_test.go", `package billing

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

func TestTakeWaitLose(t *testing.T) {
	if path, err := exec.LookPath("redis-server"); err == nil {
		t.Fatalf("redis-server is on PATH (%s): the test must run without it", path)
	}
	srv := dlocktest.NewServer(t)
	if !srv.Embedded() {
		t.Fatal("not on the embedded server")
	}
	ctx := t.Context()
	fast := dlock.WithWatchdogTimeout(300 * time.Millisecond)
	a, _ := srv.Client(t, fast).NewMutex("billing:42")
	b, _ := srv.Client(t, fast).NewMutex("billing:42")
	held, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		lc, err := b.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- lc
	}()
	select {
	case <-got:
		t.Fatal("b took a held lock")
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.Unlock(held); err != nil {
		t.Fatal(err)
	}
	lc := <-got
	if lc == nil {
		t.Fatal("b's Lock failed")
	}
	srv.FastForward(time.Minute)
	select {
	case <-lc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("b never heard that its lock was lost")
	}
	if !errors.Is(context.Cause(lc), dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(lc))
	}
}
`)
	// PATH: the go command's directory only, so that no redis-server is
	// found.
	cmd := exec.Command(gobin, "test", "-count=1", "-v", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "PATH="+filepath.Dir(gobin), dlocktest.EnvRedisURL+"=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestTakeWaitLose") {
		t.Fatalf("the user's test on the kit: %v\n%s", err, out)
	}
}
