package uitest

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// update rewrites docs/console.png with the test's screenshot, as the
// golden files of cmd/dlock are rewritten.
var update = flag.Bool("update", false, "rewrite ../docs/console.png")

// chromium is Debian's browser, which make test installs.
const chromium = "/usr/bin/chromium"

var (
	redisAddr string
	dlockBin  string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dlock-uitest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dlockBin = filepath.Join(dir, "dlock")
	build := exec.Command("go", "build", "-o", dlockBin, "github.com/dlock-go/dlock/cmd/dlock")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dlock:", err)
		return 1
	}
	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	redisAddr = srv.Addr()
	return m.Run()
}

var consoleURL = regexp.MustCompile(`on (http://127\.0\.0\.1:[0-9]+)/`)

// startConsole runs dlock ui, read-only, on a free loopback port and
// returns its URL; it is stopped when the test ends.
func startConsole(t *testing.T) string {
	return startConsoleOn(t, redisAddr, "250ms")
}

// startConsoleOn runs dlock ui on the redis-server at addr, sampling
// every interval.
func startConsoleOn(t *testing.T, addr, interval string) string {
	cmd := exec.Command(dlockBin, "ui", "--listen", "127.0.0.1:0", "--interval", interval, "--redis", "redis://"+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	m := consoleURL.FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("dlock ui printed %q (%v)", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return m[1]
}

// browser starts a headless chromium with a fresh profile that talks to
// loopback only, and returns its context; it is closed when the test ends.
// A JavaScript exception fails the test.
func browser(t *testing.T) context.Context {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v (make test installs Debian's chromium)", chromium, err)
	}
	// TMPDIR: chromium leaves a directory org.chromium.Chromium.* in the
	// temporary directory behind; in the test's own, it goes with it.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR=" + t.TempDir()),
		chromedp.WindowSize(1440, 1000),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			t.Errorf("JavaScript exception: %s", e.ExceptionDetails.Text)
		}
	}))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// within runs actions with a timeout, failing the test with what on
// expiry.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: not within %v: %v", what, d, err)
	}
}

// TestConsole loads the console in chromium: a lock taken shows within
// 2 s and goes within 2 s of its release, the deadlock cycle is drawn,
// a force-unlock on the read-only console is refused with 403 and leaves
// the lock held, and the prefix filter narrows the page. It saves a
// screenshot of the page.
func TestConsole(t *testing.T) {
	start := time.Now()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	newScene(t, rdb)
	base := startConsole(t)
	ctx := browser(t)
	// The browser lives as long as the context of its first action: no
	// timeout on this one.
	ok(t, chromedp.Do(ctx, chromedp.Navigate(base+"/")))
	within(t, ctx, 10*time.Second, "first sample", chromedp.WaitVisible(css(`tr[data-lock="billing:account:42"]`)))

	probe := probeLock(t, rdb)
	took := time.Now()
	within(t, ctx, 2*time.Second, "probe lock shown", chromedp.WaitVisible(css(`tr[data-lock="ui:probe"]`)))
	t.Logf("probe lock shown %v after it was taken", time.Since(took).Round(time.Millisecond))
	probe()
	within(t, ctx, 2*time.Second, "probe lock gone", chromedp.WaitNotPresent(css(`tr[data-lock="ui:probe"]`)))

	within(t, ctx, 5*time.Second, "deadlock drawn", chromedp.WaitVisible(css(`#graph svg g.deadlock-cycle`)))
	owners, err := chromedp.Run(ctx, chromedp.AttributeValue(css(`#graph g.deadlock-cycle`), "data-owners"))
	ok(t, err)
	if owners.Value != "2" {
		t.Errorf("the cycle has %q owners, want 2", owners.Value)
	}
	screenshot(t, ctx)
	refusedWrite(t, ctx, rdb)
	within(t, ctx, 5*time.Second, "filter by prefix", chromedp.SendKeys(css(`#prefix`), "shipping:"),
		chromedp.WaitNotPresent(css(`tr[data-lock="billing:account:42"]`)),
		chromedp.WaitVisible(css(`tr[data-lock="shipping:label-printer"]`)))
	t.Logf("browser test took %v", time.Since(start).Round(time.Millisecond))
}

// css is a CSS selector.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// probeLock takes the lock ui:probe and returns its release.
func probeLock(t *testing.T, rdb *redis.Client) func() {
	c, err := dlock.New(rdb, dlock.WithClientName("probe"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m, err := c.NewMutex("ui:probe")
	ok(t, err)
	lockCtx, err := m.Lock(t.Context())
	ok(t, err)
	return func() {
		if err := m.Unlock(lockCtx); err != nil {
			t.Fatal(err)
		}
	}
}

// refusedWrite opens a lock by clicking its row and asks to force-unlock
// it: the page shows the server's 403, and the lock stays.
func refusedWrite(t *testing.T, ctx context.Context, rdb *redis.Client) {
	within(t, ctx, 5*time.Second, "refused write",
		chromedp.Click(css(`tr[data-lock="billing:account:42"] td:nth-child(3)`)),
		chromedp.WaitVisible(css(`#detail-body dl`)),
		chromedp.Click(css(`#do-unlock`)),
		chromedp.WaitVisible(css(`#msg[data-status="403"]`)))
	msg, err := chromedp.Run(ctx, chromedp.Text(css(`#msg`)))
	ok(t, err)
	if !strings.Contains(msg, "403") || !strings.Contains(msg, "read-only") {
		t.Errorf("message %q, want the 403 and why", msg)
	}
	if n := rdb.Exists(t.Context(), "billing:account:42").Val(); n != 1 {
		t.Error("the refused write deleted the lock")
	}
}

// screenshot takes a full-page PNG; with -update it becomes
// docs/console.png.
func screenshot(t *testing.T, ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	buf, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	ok(t, err)
	if _, err := png.Decode(bytes.NewReader(buf)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), "console.png")
	if *update {
		path = filepath.Join("..", "docs", "console.png")
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(buf))
}

// TestConsoleBeyondRowCap: with more locks than an update carries rows
// for (600 mutexes before them by name), the page still shows the fair
// queues and the permit semaphore, its cards count every lock, and the
// fair-queue panel, past its own cap, says how many it shows of how many.
func TestConsoleBeyondRowCap(t *testing.T) {
	srv := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	fill(t, rdb, 600)
	fairQueues(t, rdb, 201)
	sem, err := newClient(t, rdb).NewPermitSemaphore("z:sem")
	ok(t, err)
	_, err = sem.TrySetPermits(t.Context(), 3)
	ok(t, err)
	_, err = sem.Acquire(t.Context())
	ok(t, err)
	start := time.Now()
	base := startConsoleOn(t, srv.Addr(), "250ms")
	ctx := browser(t)
	ok(t, chromedp.Do(ctx, chromedp.Navigate(base+"/")))
	t.Logf("console and page up in %v", time.Since(start).Round(time.Millisecond))
	within(t, ctx, 30*time.Second, "the panels shown", chromedp.WaitVisible(css(`#sems tbody a.lock`)),
		chromedp.WaitVisible(css(`#queues tbody a.lock`)), chromedp.WaitVisible(css(`#queues-more`)))
	t.Logf("panels shown %v after the start", time.Since(start).Round(time.Millisecond))
	const readCards = `Object.fromEntries([...document.querySelectorAll("#cards .stat")].map(
		(s) => [s.querySelector(".k").textContent, s.querySelector(".v").textContent]))`
	cards, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](readCards))
	ok(t, err)
	want := map[string]string{"Held locks": "600", "Waiters": "201", "Fair queues": "201", "Semaphores": "1"}
	for k, v := range want {
		if cards[k] != v {
			t.Errorf("card %s: %q, want %q (cards %v)", k, cards[k], v, cards)
		}
	}
	note, err := chromedp.Run(ctx, chromedp.Text(css(`#queues-more`)))
	ok(t, err)
	if !strings.Contains(note, "Showing 200 of 201 fair queues") {
		t.Errorf("fair-queue panel note %q, want it to say 200 of 201", note)
	}
}

// newClient is a Client of rdb, closed when the test ends.
func newClient(t *testing.T, rdb *redis.Client) *dlock.Client {
	c, err := dlock.New(rdb)
	ok(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fairQueues writes n free fair locks z:fair:000, z:fair:001, ... with
// one waiter each, by hand (the queue and its deadline an hour away), as
// a Redisson waiter that died leaves them.
func fairQueues(t *testing.T, rdb *redis.Client, n int) {
	ctx := t.Context()
	deadline := float64(time.Now().Add(time.Hour).UnixMilli())
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			name := fmt.Sprintf("z:fair:%03d", i)
			const owner = "11111111-2222-4333-8444-555555555555:7"
			p.RPush(ctx, layout.Prefixed(layout.QueuePrefix, name), owner)
			p.ZAdd(ctx, layout.Prefixed(layout.TimeoutPrefix, name), redis.Z{Score: deadline, Member: owner})
		}
		return nil
	})
	ok(t, err)
}
