package main

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// uiFiles are the page's files: plain HTML, CSS and JavaScript, no build
// step, nothing fetched from elsewhere.
//
//go:embed ui
var uiFiles embed.FS

// uiMaxRows bounds the locks one page update carries: the filter narrows
// what is shown; /api/state has them all.
const uiMaxRows = 500

// uiMaxPanelRows bounds the locks each of the fair-queue, read-write and
// semaphore panels carries, apart from uiMaxRows: a fair lock shows in
// its panel however many names sort before it.
const uiMaxPanelRows = 200

// uiWriteTimeout bounds the write of each response and of each event of
// a stream: a client that stops reading loses its response or stream,
// instead of holding its handler for ever.
const uiWriteTimeout = 10 * time.Second

// uiTokenHeader is the header a write carries the start's token in.
const uiTokenHeader = "X-Dlock-Token"

// uiCSP keeps the page to its own files: no inline script or style, no
// other origin, no framing.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// routes returns the console's handler: the page, its API and its event
// stream.
func (u *uiServer) routes() http.Handler {
	static, _ := fs.Sub(uiFiles, "ui") // ui is embedded: Sub cannot fail
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/state", u.handleState)
	mux.HandleFunc("GET /api/events", u.handleEvents)
	mux.HandleFunc("GET /api/locks/{name}", u.handleLock)
	mux.HandleFunc("POST /api/locks/{name}/unlock", u.handleUnlock)
	mux.HandleFunc("POST /api/queues/{name}/clear", u.handleClear)
	return u.guard(mux)
}

// guard sets the headers that keep the page to itself, and refuses a
// Host that is not an address, localhost or one of u.hosts: a DNS
// rebinding page's.
func (u *uiServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if !u.allowedHost(r.Host) {
			uiError(w, http.StatusForbidden, "Host %q refused: open the console by its address (or start it with --allow-host)", r.Host)
			return
		}
		// A response must be written within u.writeTimeout (an event
		// stream sets it again for each event), and a write blocked on a
		// client that stopped reading ends at once when the console
		// stops: Shutdown waits for no handler.
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(u.writeTimeout))
		stop := context.AfterFunc(r.Context(), func() { _ = rc.SetWriteDeadline(time.Now()) })
		defer stop()
		next.ServeHTTP(w, r)
	})
}

// allowedHost reports whether a Host header names an IP address,
// localhost or one of u.hosts: what a browser sends to the console, and
// not what a page whose DNS name was rebound to it sends.
func (u *uiServer) allowedHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = normalHost(strings.Trim(host, "[]"))
	return host == "localhost" || net.ParseIP(host) != nil || slices.Contains(u.hosts, host)
}

// normalHost is a DNS name as the Host check compares it: lower-case,
// without a final dot.
func normalHost(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// uiView is one update of the page: the sample filtered by the viewer's
// prefix, and the charts and graph drawn for it.
type uiView struct {
	State uiState `json:"state"`
	// Matched is the number of locks matching the prefix; State.Locks
	// has the first uiMaxRows of them.
	Matched int `json:"matched"`
	// Held and Waiters are the cards' counts, of every matching lock.
	Held    int   `json:"held"`
	Waiters int64 `json:"waiters"`
	// Queues, RW and Sems are the panels' locks: fair locks with waiters,
	// read-write locks and permit semaphores.
	Queues   uiPanel `json:"queues"`
	RW       uiPanel `json:"rw"`
	Sems     uiPanel `json:"semaphores"`
	Prefix   string  `json:"prefix"`
	AcqSVG   string  `json:"acq_svg"`
	WaitSVG  string  `json:"wait_svg"`
	GraphSVG string  `json:"graph_svg"`
}

// view is sample st as the viewer with prefix sees it.
func (u *uiServer) view(st uiState, prefix string) uiView {
	st = filterState(st, prefix)
	v := uiView{Matched: len(st.Locks), Prefix: prefix}
	v.count(st.Locks)
	st.Locks = st.Locks[:min(len(st.Locks), uiMaxRows)]
	v.State = st
	u.mu.Lock()
	series := u.hist.series(st.SampledAt, prefix)
	u.mu.Unlock()
	v.AcqSVG, v.WaitSVG = chartsSVG(series, prefix)
	v.GraphSVG = deadlockSVG(st.Deadlocks)
	return v
}

// uiPanel is one panel's locks: the first uiMaxPanelRows, and how many
// there are.
type uiPanel struct {
	Rows  []uiLock `json:"rows"`
	Total int      `json:"total"`
}

// count sets the cards' counts and the panels from every matching lock,
// not only the rows the update carries.
func (v *uiView) count(locks []uiLock) {
	for _, l := range locks {
		if l.Locked {
			v.Held++
		}
		v.Waiters += l.Waiters
	}
	v.Queues = panelOf(locks, func(l uiLock) bool { return len(l.Queue) > 0 })
	v.RW = panelOf(locks, func(l uiLock) bool { return l.Kind == "rwlock" })
	v.Sems = panelOf(locks, func(l uiLock) bool { return l.Semaphore != nil })
}

// panelOf is the panel of the locks for which keep holds.
func panelOf(locks []uiLock, keep func(uiLock) bool) uiPanel {
	p := uiPanel{Rows: []uiLock{}}
	for _, l := range locks {
		if !keep(l) {
			continue
		}
		p.Total++
		if len(p.Rows) < uiMaxPanelRows {
			p.Rows = append(p.Rows, l)
		}
	}
	return p
}

// filterState keeps the locks and elections of st whose name starts with
// prefix. Deadlock cycles stay: they span names.
func filterState(st uiState, prefix string) uiState {
	if prefix == "" {
		return st
	}
	locks := []uiLock{}
	for _, l := range st.Locks {
		if strings.HasPrefix(l.Name, prefix) {
			locks = append(locks, l)
		}
	}
	elections := []leaderJSON{}
	for _, e := range st.Elections {
		if strings.HasPrefix(e.Name, prefix) {
			elections = append(elections, e)
		}
	}
	st.Locks, st.Elections = locks, elections
	return st
}

// handleState serves the latest sample as JSON, filtered by ?prefix=.
func (u *uiServer) handleState(w http.ResponseWriter, r *http.Request) {
	st, _ := u.current()
	uiJSON(w, http.StatusOK, filterState(st, r.URL.Query().Get("prefix")))
}

// handleEvents streams the page's updates, one per sample, as
// server-sent events, until the viewer goes, stops reading for
// u.writeTimeout, or the console stops.
func (u *uiServer) handleEvents(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w) // guard cuts its deadline when the console stops
	prefix := r.URL.Query().Get("prefix")
	for {
		st, next := u.current()
		if !st.SampledAt.IsZero() && u.sendEvent(r.Context(), w, rc, u.view(st, prefix)) != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-next:
		}
	}
}

// sendEvent writes v as one event, which must be written within
// u.writeTimeout; it fails once ctx has ended.
func (u *uiServer) sendEvent(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, v uiView) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := rc.SetWriteDeadline(time.Now().Add(u.writeTimeout)); err != nil {
		return err
	}
	// ctx may have ended, and its cut of the deadline been undone, while
	// the deadline was set.
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return err
	}
	return rc.Flush()
}

// handleLock serves one lock as dlock status --json reads it, now.
func (u *uiServer) handleLock(w http.ResponseWriter, r *http.Request) {
	states, err := u.read(r.Context(), r.PathValue("name"))
	if err != nil {
		u.fail(w, err)
		return
	}
	uiJSON(w, http.StatusOK, heldState(states))
}

// read checks name and reads it as dlock status does.
func (u *uiServer) read(ctx context.Context, name string) ([]lockState, error) {
	if err := u.s.validName("ui", name); err != nil {
		return nil, err
	}
	return inspectAll(ctx, u.s, name)
}

// uiWriteResult is the answer to a write.
type uiWriteResult struct {
	Name    string `json:"name"`
	Done    bool   `json:"done"`
	Message string `json:"message"`
}

// handleUnlock force-unlocks a lock, as dlock unlock --force --yes does.
func (u *uiServer) handleUnlock(w http.ResponseWriter, r *http.Request) {
	if !u.allowWrite(w, r) {
		return
	}
	name := r.PathValue("name")
	states, err := u.read(r.Context(), name)
	if err != nil {
		u.fail(w, err)
		return
	}
	st := heldState(states)
	res := uiWriteResult{Name: name, Message: "not held; nothing to unlock"}
	switch {
	case st.Semaphore != nil:
		uiError(w, http.StatusConflict, "%q is a semaphore, not a lock", name)
		return
	case st.Locked:
		if res.Done, err = forceUnlock(r.Context(), u.s, st); err != nil {
			u.fail(w, err)
			return
		}
		res.Message = "unlocked (" + holdersText(st) + ")"
		if !res.Done {
			res.Message = "released in the meantime; nothing to unlock"
		}
	}
	uiJSON(w, http.StatusOK, res)
}

// handleClear deletes a fair lock's queue, as dlock clear-queue --yes
// does.
func (u *uiServer) handleClear(w http.ResponseWriter, r *http.Request) {
	if !u.allowWrite(w, r) {
		return
	}
	name := r.PathValue("name")
	states, err := u.read(r.Context(), name)
	if err != nil {
		u.fail(w, err)
		return
	}
	waiting := queued(states)
	if err := clearQueues(r.Context(), u.s, name, waiting); err != nil {
		u.fail(w, err)
		return
	}
	res := uiWriteResult{Name: name, Done: waiting > 0, Message: "no waiters; nothing to clear"}
	if waiting > 0 {
		res.Message = "cleared the queue (" + plural(int64(waiting), "waiter") + ")"
	}
	uiJSON(w, http.StatusOK, res)
}

// allowWrite lets a write through only when the console allows writes
// and the request comes from the page (not another site) with the
// start's token in X-Dlock-Token; otherwise it answers 403.
func (u *uiServer) allowWrite(w http.ResponseWriter, r *http.Request) bool {
	err := u.checkWrite(r)
	if err != nil {
		uiError(w, http.StatusForbidden, "write refused: %v", err)
	}
	return err == nil
}

func (u *uiServer) checkWrite(r *http.Request) error {
	if !u.writes {
		return errors.New("the console is read-only (start dlock ui with --allow-writes)")
	}
	if err := u.cop.Check(r); err != nil {
		return fmt.Errorf("cross-site request: %w", err)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		return fmt.Errorf("cross-origin request from %q", o)
	}
	got := r.Header.Get(uiTokenHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(u.token)) != 1 {
		return fmt.Errorf("missing or wrong %s (dlock ui printed the token at start)", uiTokenHeader)
	}
	return nil
}

// fail answers err, with the endpoint's passwords masked: 400 for a bad
// name, 502 for what Redis did.
func (u *uiServer) fail(w http.ResponseWriter, err error) {
	msg := u.s.eps[0].scrub(err.Error())
	var e *exitError
	if errors.As(err, &e) && e.code == exitUsage {
		uiError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	uiError(w, http.StatusBadGateway, "%s", msg)
}

// uiError answers {"error": ...} with status code.
func uiError(w http.ResponseWriter, code int, format string, args ...any) {
	uiJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// uiJSON answers v as JSON with status code.
func uiJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
