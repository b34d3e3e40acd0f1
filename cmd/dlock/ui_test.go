package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// uiRun is a dlock ui running in-process for a test.
type uiRun struct {
	base   string // http://127.0.0.1:PORT
	token  string // the write token it printed, if any
	stdout *syncBuffer
	stderr *syncBuffer
}

var (
	uiURLLine   = regexp.MustCompile(`on (http://[0-9.:]+)/`)
	uiTokenLine = regexp.MustCompile(`token: ([0-9a-f]{32})`)
)

// startUI runs dlock ui with args on a free loopback port, sampling every
// 100ms, against the test server unless env's DLOCK_REDIS_URL says
// otherwise; it stops when the test ends.
func startUI(t *testing.T, env map[string]string, args ...string) *uiRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := &uiRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	c := &cli{stdin: strings.NewReader(""), stdout: u.stdout, stderr: u.stderr, getenv: func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "DLOCK_REDIS_URL" {
			return redisURL
		}
		return ""
	}}
	done := make(chan int, 1)
	go func() {
		done <- c.main(ctx, append([]string{"ui", "--listen", "127.0.0.1:0", "--interval", "100ms"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("dlock ui did not stop within 10s of its context")
		}
	})
	eventually(t, 10*time.Second, func() error {
		m := uiURLLine.FindStringSubmatch(u.stdout.String())
		if m == nil {
			return fmt.Errorf("no URL printed yet: stdout %q, stderr %q", u.stdout.String(), u.stderr.String())
		}
		u.base = m[1]
		return nil
	})
	if m := uiTokenLine.FindStringSubmatch(u.stdout.String()); m != nil {
		u.token = m[1]
	}
	return u
}

// get fetches path and returns the status and body.
func (u *uiRun) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(u.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// post sends a write with the given headers and returns the status and
// body.
func (u *uiRun) post(t *testing.T, path string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// state returns the locks of GET /api/state?prefix=name, decoded loosely.
func (u *uiRun) state(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	code, body := u.get(t, "/api/state?prefix="+url.QueryEscape(prefix))
	if code != http.StatusOK {
		t.Fatalf("GET /api/state: %d %s", code, body)
	}
	var st struct {
		Locks []map[string]any `json:"locks"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st.Locks
}

// holdLock takes lock name with a Client of its own and returns its
// release.
func holdLock(t *testing.T, name string) func() {
	t.Helper()
	c, err := dlock.New(newRedis(t), dlock.WithClientName("ui-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := m.Unlock(lockCtx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUIStateIsList: GET /api/state shows a held lock with the fields
// and values of dlock list --json (the lease left aside, which runs), and
// the holder's record.
func TestUIStateIsList(t *testing.T) {
	name := lockName(t)
	holdLock(t, name)
	u := startUI(t, nil)
	var got map[string]any
	eventually(t, 5*time.Second, func() error {
		locks := u.state(t, name)
		if len(locks) != 1 {
			return fmt.Errorf("state has %d locks, want 1", len(locks))
		}
		got = locks[0]
		return nil
	})
	r := cliRun(t, "list", "--json", name)
	var want []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &want); err != nil || len(want) != 1 {
		t.Fatalf("list --json: %v, %q", err, r.stdout)
	}
	for k, v := range want[0] {
		if k == "ttl_ms" {
			continue
		}
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("state %s = %v, list --json has %v", k, got[k], v)
		}
	}
	if _, ok := got["ttl_ms"]; !ok {
		t.Error("state has no ttl_ms")
	}
	if !strings.Contains(fmt.Sprint(got["holders"]), "ui-test") {
		t.Errorf("holders %v, want the holder record's label", got["holders"])
	}
}

// events reads the server-sent events of path and sends each data line.
func (u *uiRun) events(t *testing.T, path string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 100)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				select {
				case out <- data:
				default: // the test reads only the latest
				}
			}
		}
	}()
	return out
}

// awaitEvent waits up to timeout for an event for which ok holds.
func awaitEvent(t *testing.T, evs <-chan string, timeout time.Duration, what string, ok func(v uiView) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case data, open := <-evs:
			if !open {
				t.Fatalf("%s: the event stream ended", what)
			}
			var v uiView
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatal(err)
			}
			if ok(v) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no such event within %v", what, timeout)
		}
	}
}

// TestUIEventsPush: the event stream, filtered by prefix, shows a lock
// taken within a second, and its release within a second.
func TestUIEventsPush(t *testing.T) {
	name := lockName(t)
	u := startUI(t, nil)
	evs := u.events(t, "/api/events?prefix="+url.QueryEscape(name))
	awaitEvent(t, evs, 5*time.Second, "first sample", func(v uiView) bool { return len(v.State.Locks) == 0 })
	release := holdLock(t, name)
	awaitEvent(t, evs, time.Second, "lock shown", func(v uiView) bool {
		return len(v.State.Locks) == 1 && v.State.Locks[0].Name == name && v.Prefix == name
	})
	release()
	awaitEvent(t, evs, time.Second, "lock gone", func(v uiView) bool { return len(v.State.Locks) == 0 })
}

// TestUIWritesRefused: a force-unlock is refused with 403, the lock left
// held, on a read-only console, and on one with --allow-writes without
// the token, with a wrong one, or from another site; with the token from
// the page's own origin it unlocks.
func TestUIWritesRefused(t *testing.T) {
	name := lockName(t)
	holdLock(t, name)
	path := "/api/locks/" + url.PathEscape(name) + "/unlock"
	ro := startUI(t, nil)
	if code, body := ro.post(t, path, nil); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("read-only console: %d %s, want 403", code, body)
	}
	rw := startUI(t, nil, "--allow-writes")
	if rw.token == "" {
		t.Fatalf("no token printed: %q", rw.stdout.String())
	}
	origin := rw.base
	for _, tc := range []struct {
		what string
		hdr  map[string]string
	}{
		{"no token", map[string]string{"Origin": origin}},
		{"wrong token", map[string]string{uiTokenHeader: strings.Repeat("0", 32), "Origin": origin}},
		{"read-only console's token", map[string]string{uiTokenHeader: ro.token, "Origin": origin}},
		{"another origin", map[string]string{uiTokenHeader: rw.token, "Origin": "http://evil.example"}},
		{"another origin, claiming same-origin", map[string]string{uiTokenHeader: rw.token, "Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}},
		{"cross-site fetch", map[string]string{uiTokenHeader: rw.token, "Sec-Fetch-Site": "cross-site"}},
	} {
		if code, body := rw.post(t, path, tc.hdr); code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", tc.what, code, body)
		}
	}
	if !exists(t, newRedis(t), name) {
		t.Fatal("a refused write deleted the lock")
	}
	code, body := rw.post(t, path, map[string]string{uiTokenHeader: rw.token, "Origin": origin, "Sec-Fetch-Site": "same-origin"})
	if code != http.StatusOK || !strings.Contains(body, `"done":true`) || exists(t, newRedis(t), name) {
		t.Errorf("with the token: %d %s, lock exists %v; want 200 and the lock gone", code, body, exists(t, newRedis(t), name))
	}
}

// TestUIClearQueue: clearing a fair queue is refused on a read-only
// console and works with the token, as dlock clear-queue does.
func TestUIClearQueue(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	queueByHand(t, rdb, name, javaWaiter)
	path := "/api/queues/" + url.PathEscape(name) + "/clear"
	if code, _ := startUI(t, nil).post(t, path, nil); code != http.StatusForbidden {
		t.Errorf("read-only console: %d, want 403", code)
	}
	if n := rdb.LLen(t.Context(), "redisson_lock_queue:{"+name+"}").Val(); n != 1 {
		t.Fatalf("queue has %d waiters after a refused clear, want 1", n)
	}
	rw := startUI(t, nil, "--allow-writes")
	code, body := rw.post(t, path, map[string]string{uiTokenHeader: rw.token})
	if code != http.StatusOK || !strings.Contains(body, "1 waiter") {
		t.Errorf("with the token: %d %s", code, body)
	}
	if exists(t, rdb, "redisson_lock_queue:{"+name+"}") {
		t.Error("the queue is still there")
	}
}

// TestUILoopbackByDefault: without --listen the console binds loopback,
// and a request whose Host is a name other than localhost (a DNS
// rebinding page's) is refused.
func TestUILoopbackByDefault(t *testing.T) {
	a, err := (&cli{getenv: func(string) string { return "" }}).parseUI(nil)
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(a.listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("default --listen %q is not a loopback address", a.listen)
	}
	u := startUI(t, nil)
	req, _ := http.NewRequest(http.MethodGet, u.base+"/api/state", nil)
	req.Host = "rebound.example:7070"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host rebound.example: %d, want 403", resp.StatusCode)
	}
}

// TestUINoPassword: with a password in the Redis URL, neither the page,
// its files, the API, the event stream nor the terminal shows it.
func TestUINoPassword(t *testing.T) {
	const pw = "s3cret-Pa55word"
	srv := redistest.NewServer(t)
	if _, err := srv.Do(t.Context(), "CONFIG", "SET", "requirepass", pw); err != nil {
		t.Fatal(err)
	}
	rawURL := "redis://:" + pw + "@" + srv.Addr()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: pw})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m, _ := c.NewMutex("pw:lock")
	if _, err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	u := startUI(t, map[string]string{"DLOCK_REDIS_URL": rawURL}, "--allow-writes")
	evs := u.events(t, "/api/events")
	var seen []string
	awaitEvent(t, evs, 5*time.Second, "the lock", func(v uiView) bool {
		b, _ := json.Marshal(v)
		seen = append(seen, string(b))
		return len(v.State.Locks) == 1
	})
	for _, p := range []string{"/", "/app.js", "/style.css", "/api/state", "/api/locks/pw:lock", "/api/locks/" + url.PathEscape("{bad"), "/nothing"} {
		_, body := u.get(t, p)
		seen = append(seen, body)
	}
	_, body := u.post(t, "/api/locks/pw:lock/unlock", nil)
	seen = append(seen, body, u.stdout.String(), u.stderr.String())
	for _, s := range seen {
		if strings.Contains(s, pw) || strings.Contains(s, url.QueryEscape(pw)) {
			t.Fatalf("the password shows in %q", s)
		}
	}
	if !strings.Contains(strings.Join(seen, ""), "xxxxx@") {
		t.Error("the masked URL is not shown")
	}
}

// TestUIClusterAndSentinel: the console samples a cluster (every master)
// and a sentinel-watched master, given by their URLs, as dlock list does.
func TestUIClusterAndSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and a sentinel group")
	}
	cluster := redistest.NewCluster(t)
	sentinel := redistest.NewSentinel(t)
	addrs, sentinels := cluster.Addrs(), sentinel.SentinelAddrs()
	for _, tc := range []struct{ mode, url string }{
		{"cluster", "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]},
		{"sentinel", "redis://" + sentinels[0] + "?master_name=" + sentinel.MasterName() + "&addr=" + sentinels[1]},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			names := []string{"ui:" + tc.mode + ":a", "ui:" + tc.mode + ":b", "ui:" + tc.mode + ":c"}
			for _, name := range names {
				dlockProcess(t, "hold", "--redis", tc.url, name)
			}
			u := startUI(t, map[string]string{"DLOCK_REDIS_URL": tc.url})
			eventually(t, 10*time.Second, func() error {
				locks := u.state(t, "ui:"+tc.mode+":")
				if len(locks) != len(names) {
					return fmt.Errorf("%d locks, want %d", len(locks), len(names))
				}
				return nil
			})
			if _, body := u.get(t, "/api/state"); !strings.Contains(body, `"mode":"`+tc.mode+`"`) {
				t.Errorf("state does not say mode %s", tc.mode)
			}
		})
	}
}
