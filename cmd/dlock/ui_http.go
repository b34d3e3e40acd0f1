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
	"strings"
)

// uiFiles are the page's files: plain HTML, CSS and JavaScript, no build
// step, nothing fetched from elsewhere.
//
//go:embed ui
var uiFiles embed.FS

// uiMaxRows bounds the locks one page update carries: the filter narrows
// what is shown; /api/state has them all.
const uiMaxRows = 500

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
// Host that is not an address or localhost (a DNS rebinding page's) when
// the console listens on loopback.
func (u *uiServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if !u.anyHost && !loopbackHost(r.Host) {
			uiError(w, http.StatusForbidden, "Host %q refused: open the console by its address", r.Host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names an IP address or
// localhost: what a browser sends to a console on loopback, and not what
// a rebound DNS name sends.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.Trim(host, "[]")
	return host == "localhost" || net.ParseIP(host) != nil
}

// uiView is one update of the page: the sample filtered by the viewer's
// prefix, and the charts and graph drawn for it.
type uiView struct {
	State uiState `json:"state"`
	// Matched is the number of locks matching the prefix; State.Locks
	// has the first uiMaxRows of them.
	Matched  int    `json:"matched"`
	Prefix   string `json:"prefix"`
	AcqSVG   string `json:"acq_svg"`
	WaitSVG  string `json:"wait_svg"`
	GraphSVG string `json:"graph_svg"`
}

// view is sample st as the viewer with prefix sees it.
func (u *uiServer) view(st uiState, prefix string) uiView {
	st = filterState(st, prefix)
	v := uiView{Matched: len(st.Locks), Prefix: prefix}
	st.Locks = st.Locks[:min(len(st.Locks), uiMaxRows)]
	v.State = st
	u.mu.Lock()
	series := u.hist.series(st.SampledAt, prefix)
	u.mu.Unlock()
	v.AcqSVG, v.WaitSVG = chartsSVG(series, prefix)
	v.GraphSVG = deadlockSVG(st.Deadlocks)
	return v
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
// server-sent events, until the viewer goes or the console stops.
func (u *uiServer) handleEvents(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	prefix := r.URL.Query().Get("prefix")
	for {
		st, next := u.current()
		if !st.SampledAt.IsZero() {
			b, err := json.Marshal(u.view(st, prefix))
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil || rc.Flush() != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-next:
		}
	}
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
