package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
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
	uiURLLine   = regexp.MustCompile(`on (http://[0-9.:\[\]]+)/`)
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

// fillLocks writes n held mutexes prefix000, prefix001, ... by hand, as
// Redisson does, with an hour's lease.
func fillLocks(t *testing.T, rdb *redis.Client, prefix string, n int) {
	t.Helper()
	ctx := t.Context()
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			name := fmt.Sprintf("%s%03d", prefix, i)
			p.HSet(ctx, name, fmt.Sprintf("%08x-0000-4000-8000-000000000000:1", i), 1)
			p.PExpire(ctx, name, time.Hour)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// holdRead takes the read-write lock name in read mode with a Client of
// its own.
func holdRead(t *testing.T, name string) {
	t.Helper()
	c, err := dlock.New(newRedis(t), dlock.WithClientName("ui-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	rw, err := c.NewRWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.ReadLock().Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestUIPanelsBeyondRowCap: with more locks than an update carries rows
// for, a fair queue, a read-write lock and a permit semaphore whose names
// sort after them still reach their panels, and the cards count every
// lock, as GET /api/state has them.
func TestUIPanelsBeyondRowCap(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	fillLocks(t, rdb, name+":a:", 600)
	fair, rwName, sem := name+":z:fair", name+":z:rw", name+":z:permits"
	queueByHand(t, rdb, fair, javaWaiter)
	holdRead(t, rwName)
	goldenSemaphores(t, name+":z:")
	u := startUI(t, nil)
	evs := u.events(t, "/api/events?prefix="+url.QueryEscape(name))
	var v uiView
	awaitEvent(t, evs, 10*time.Second, "every lock sampled", func(got uiView) bool {
		v = got
		return got.Matched >= 603
	})
	if len(v.State.Locks) != uiMaxRows {
		t.Errorf("the update has %d rows of locks, want %d", len(v.State.Locks), uiMaxRows)
	}
	for _, p := range []struct {
		what  string
		panel uiPanel
		want  string
	}{{"fair queues", v.Queues, fair}, {"read-write", v.RW, rwName}, {"semaphores", v.Sems, sem}} {
		if p.panel.Total != 1 || len(p.panel.Rows) != 1 || p.panel.Rows[0].Name != p.want {
			t.Errorf("%s panel: %d of %d rows %v, want %s", p.what, len(p.panel.Rows), p.panel.Total, p.panel.Rows, p.want)
		}
	}
	held, waiters := 0, int64(0)
	for _, l := range u.state(t, name) {
		if l["locked"] == true {
			held++
		}
		w, _ := l["waiters"].(float64)
		waiters += int64(w)
	}
	if v.Held != held || v.Waiters != waiters || waiters < 1 {
		t.Errorf("cards: %d held, %d waiters; GET /api/state has %d held, %d waiters (want at least 1)", v.Held, v.Waiters, held, waiters)
	}
}

// TestUIPanelOf: a panel carries its first uiMaxPanelRows locks and
// counts them all.
func TestUIPanelOf(t *testing.T) {
	var locks []uiLock
	for i := range uiMaxPanelRows + 50 {
		locks = append(locks, uiLock{topLock: topLock{lockState: lockState{Name: fmt.Sprint(i), Kind: "rwlock"}}})
	}
	locks = append(locks, uiLock{topLock: topLock{lockState: lockState{Name: "other", Kind: "mutex"}}})
	p := panelOf(locks, func(l uiLock) bool { return l.Kind == "rwlock" })
	if p.Total != uiMaxPanelRows+50 || len(p.Rows) != uiMaxPanelRows {
		t.Fatalf("panel of %d rows of %d, want %d of %d", len(p.Rows), p.Total, uiMaxPanelRows, uiMaxPanelRows+50)
	}
	if p.Rows[0].Name != "0" || p.Rows[uiMaxPanelRows-1].Name != fmt.Sprint(uiMaxPanelRows-1) {
		t.Errorf("panel rows %s..%s, want the first of them", p.Rows[0].Name, p.Rows[uiMaxPanelRows-1].Name)
	}
}

// hostStatus sends GET /api/state with Host host and returns the status.
func (u *uiRun) hostStatus(t *testing.T, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u.base+"/api/state", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUIHostCheck: listening beyond loopback, the console still refuses
// a Host that is some name (a DNS rebinding page's); it answers one that
// is an address, localhost, the machine's hostname or a name given with
// --allow-host. On loopback, the hostname is refused, an --allow-host
// name answered.
func TestUIHostCheck(t *testing.T) {
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	short, _, _ := strings.Cut(hostname, ".")
	wide := startUI(t, nil, "--listen", "0.0.0.0:0", "--allow-host", "Console.Example", "--allow-host", "other.example")
	lo := startUI(t, nil, "--allow-host", "console.example")
	type hostCase struct {
		u    *uiRun
		what string
		host string
		want int
	}
	cases := []hostCase{
		{wide, "wide", "rebound.example:7070", http.StatusForbidden},
		{wide, "wide", "console.example:7070", http.StatusOK},
		{wide, "wide", "CONSOLE.example.", http.StatusOK},
		{wide, "wide", "other.example", http.StatusOK},
		{wide, "wide", hostname + ":7070", http.StatusOK},
		{wide, "wide", short, http.StatusOK},
		{wide, "wide", "127.0.0.1:7070", http.StatusOK},
		{wide, "wide", "[::1]:7070", http.StatusOK},
		{wide, "wide", "localhost:7070", http.StatusOK},
		{lo, "loopback", "console.example:7070", http.StatusOK},
		{lo, "loopback", "rebound.example", http.StatusForbidden},
	}
	if normalHost(short) != "localhost" && net.ParseIP(hostname) == nil {
		cases = append(cases, hostCase{lo, "loopback", hostname, http.StatusForbidden})
	}
	for _, tc := range cases {
		if got := tc.u.hostStatus(t, tc.host); got != tc.want {
			t.Errorf("%s: Host %q: %d, want %d", tc.what, tc.host, got, tc.want)
		}
	}
}

// stallWatch is an event stream's ResponseWriter that sees how long its
// writes block: a viewer that stops reading blocks them.
type stallWatch struct {
	http.ResponseWriter
	since   atomic.Int64 // when the write in progress began (UnixNano); 0 if none
	longest atomic.Int64 // the longest write so far (ns)
}

func (s *stallWatch) Write(b []byte) (int, error) {
	start := time.Now()
	s.since.Store(start.UnixNano())
	defer func() {
		s.since.Store(0)
		if d := int64(time.Since(start)); d > s.longest.Load() {
			s.longest.Store(d)
		}
	}()
	return s.ResponseWriter.Write(b)
}

func (s *stallWatch) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// stalledFor reports whether a write has been blocked for d.
func (s *stallWatch) stalledFor(d time.Duration) bool {
	since := s.since.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= d
}

// testUIServer is a console with no session and no sample yet, for the
// event stream, which needs no Redis.
func testUIServer(writeTimeout time.Duration) *uiServer {
	u := &uiServer{changed: make(chan struct{}), writeTimeout: writeTimeout}
	u.hist.init()
	return u
}

// publishing publishes a sample of n locks with long names (a kilobyte
// each) as u's every 5ms until the test ends.
func publishing(t *testing.T, u *uiServer, n int) {
	st := uiState{Locks: []uiLock{}, Elections: []leaderJSON{}, Deadlocks: []deadlockJSON{}}
	for i := range n {
		name := fmt.Sprintf("%s:%d", strings.Repeat("x", 1000), i)
		st.Locks = append(st.Locks, uiLock{topLock: topLock{lockState: lockState{Name: name, Locked: true, Holders: []holder{}}}})
	}
	publish := func() {
		st.SampledAt = time.Now()
		u.mu.Lock()
		u.state = st
		close(u.changed)
		u.changed = make(chan struct{})
		u.mu.Unlock()
	}
	publish() // the first before any request
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			publish()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
	})
}

// stalledStream serves u's event stream over TCP to a viewer that never
// reads, while samples are published. It returns the stream's writer, a
// channel closed when its handler returns, and what ends the request's
// context as the console's stop does.
func stalledStream(t *testing.T, u *uiServer) (*stallWatch, <-chan struct{}, context.CancelFunc) {
	return stalled(t, u, "/api/events", uiMaxRows)
}

// stalled serves u's routes over TCP to a client that asks for path and
// never reads, while samples of n locks are published; it returns as
// stalledStream does.
func stalled(t *testing.T, u *uiServer, path string, n int) (*stallWatch, <-chan struct{}, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	writers, done := make(chan *stallWatch, 1), make(chan struct{})
	routes := u.routes()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		sw := &stallWatch{ResponseWriter: w}
		writers <- sw
		routes.ServeHTTP(sw, r)
	}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(srv.Close) // after the viewer has gone: the handler then ends
	t.Cleanup(cancel)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	publishing(t, u, n)
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	select {
	case sw := <-writers:
		return sw, done, cancel
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the handler")
		return nil, nil, nil
	}
}

// TestUIEventsStalledViewer: a viewer that stops reading loses its event
// stream once a write has been blocked for the write timeout, and at
// once when the console stops, however long the timeout: its handler
// does not block for ever, nor hold up the console's Shutdown.
func TestUIEventsStalledViewer(t *testing.T) {
	t.Run("write timeout", func(t *testing.T) {
		sw, done, _ := stalledStream(t, testUIServer(200*time.Millisecond))
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler still writes to a viewer that stopped reading, past its 200ms write timeout")
		}
		if longest := time.Duration(sw.longest.Load()); longest < 100*time.Millisecond {
			t.Errorf("the stream ended after writes of at most %v: not by its write timeout", longest)
		}
	})
	t.Run("console stops", func(t *testing.T) {
		sw, done, stop := stalledStream(t, testUIServer(time.Hour))
		awaitStalled(t, sw)
		stop()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatal("the handler still writes to a stalled viewer 2s after the console stopped")
		}
	})
}

// awaitStalled waits until a write to sw has been blocked for 200ms.
func awaitStalled(t *testing.T, sw *stallWatch) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if !sw.stalledFor(200 * time.Millisecond) {
			return errors.New("no write blocked for 200ms yet")
		}
		return nil
	})
}

// TestUIStateStalledClient: a client of /api/state that stops reading a
// large answer (20 MB) holds its handler no longer than the write
// timeout, and not at all once the console stops.
func TestUIStateStalledClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		stop    bool
	}{{"write timeout", 200 * time.Millisecond, false}, {"console stops", time.Hour, true}} {
		t.Run(tc.name, func(t *testing.T) {
			sw, done, stop := stalled(t, testUIServer(tc.timeout), "/api/state", 20000)
			if tc.stop {
				awaitStalled(t, sw)
				stop()
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("the /api/state handler still writes to a client that stopped reading (%s)", tc.name)
			}
		})
	}
}
