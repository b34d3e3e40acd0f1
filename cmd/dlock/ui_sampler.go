package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/layout"
)

// uiServer is dlock ui: the session it samples Redis through, the latest
// sample, and the history its charts draw. Every viewer reads the same
// sample: the cost to Redis does not grow with them.
type uiServer struct {
	s      *session
	writes bool   // --allow-writes
	token  string // what a write's X-Dlock-Token must be
	// hosts are the names, besides IP addresses and localhost, that a
	// request's Host may carry (uiHosts), lower-case.
	hosts []string
	cop   *http.CrossOriginProtection
	// writeTimeout bounds the write of each event of a stream.
	writeTimeout time.Duration

	mu      sync.Mutex
	state   uiState       // the latest sample
	changed chan struct{} // closed, and replaced, at each sample
	hist    uiHistory
}

// uiState is one sample of the deployment: what GET /api/state returns.
// Locks have the fields of dlock list --json, plus top's waiters and
// holds and what the console saw of how long they are held.
type uiState struct {
	Redis     string         `json:"redis"`
	Mode      string         `json:"mode"`
	SampledAt time.Time      `json:"sampled_at"`
	ScanMS    int64          `json:"scan_ms"`
	Error     string         `json:"error,omitempty"`
	Writes    bool           `json:"writes"`
	Locks     []uiLock       `json:"locks"`
	Elections []leaderJSON   `json:"elections"`
	Deadlocks []deadlockJSON `json:"deadlocks"`
}

// uiLock is one lock of a sample.
type uiLock struct {
	topLock
	// HeldForMS is how long the console has seen the first holder hold
	// the lock: a lower bound, since Redis keeps no acquisition time.
	HeldForMS *int64 `json:"held_for_ms,omitempty"`
	// HeldBeforeStart: the first holder held it when the console
	// started, so HeldForMS counts from the console's first sample.
	HeldBeforeStart bool `json:"held_before_start,omitempty"`
}

// newUIServer returns the console of session s, with no sample yet.
func newUIServer(s *session, writes bool, token string) *uiServer {
	u := &uiServer{
		s: s, writes: writes, token: token, cop: http.NewCrossOriginProtection(),
		changed: make(chan struct{}), writeTimeout: uiWriteTimeout,
	}
	u.state = uiState{Redis: s.eps[0].display, Mode: s.eps[0].mode, Writes: writes, Locks: []uiLock{}, Elections: []leaderJSON{}, Deadlocks: []deadlockJSON{}}
	u.hist.init()
	return u
}

// sample takes a sample now and then every interval until ctx ends. A
// sample that takes longer than the interval delays the next one: there
// is never more than one scan running, and Redis spends at most half its
// time on the console's scans.
func (u *uiServer) sample(ctx context.Context, interval time.Duration) {
	for {
		start := time.Now()
		u.sampleOnce(ctx)
		took := time.Since(start)
		wait := max(interval-took, took)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// sampleOnce reads the deployment once, as dlock list, leader and
// deadlocks do, and publishes the sample to every viewer. On an error the
// previous locks stay, with the error, which carries no password.
func (u *uiServer) sampleOnce(ctx context.Context) {
	start := time.Now()
	locks, err := listServer(ctx, u.s, 0, "*")
	var elections []leaderJSON
	var cycles []deadlockJSON
	if err == nil {
		elections, err = u.elections(ctx)
	}
	if err == nil {
		cycles, err = u.deadlocks(ctx)
	}
	if ctx.Err() != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.state
	st.SampledAt, st.ScanMS, st.Error = start, time.Since(start).Milliseconds(), ""
	if err != nil {
		st.Error = u.s.eps[0].scrub(redisError("sampling", err).Error())
	} else {
		st.Locks = u.hist.observe(start, locks)
		st.Elections, st.Deadlocks = elections, cycles
	}
	u.state = st
	close(u.changed)
	u.changed = make(chan struct{})
}

// current returns the latest sample and a channel closed at the next.
func (u *uiServer) current() (uiState, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state, u.changed
}

// elections reads every election with a leader: the records
// dlock:election:{NAME}, found with SCAN, each read as dlock leader does.
func (u *uiServer) elections(ctx context.Context) ([]leaderJSON, error) {
	keys, err := scanType(ctx, u.s.rdbs[0], layout.ElectionPrefix+":*", "hash")
	if err != nil {
		return nil, err
	}
	out := []leaderJSON{}
	for _, key := range keys {
		name := electionName(key)
		if name == "" {
			continue
		}
		e, err := u.s.clients[0].NewElection(name)
		if err != nil {
			continue // not an election record after all
		}
		info, err := e.Leader(ctx)
		if errors.Is(err, dlock.ErrNoLeader) {
			continue // ended since the scan
		}
		if err != nil {
			return nil, err
		}
		out = append(out, leaderJSONOf(name, info))
	}
	return out, nil
}

// electionName is the election whose record key is, or "".
func electionName(key string) string { return prefixedName(layout.ElectionPrefix, key) }

// deadlocks reads the wait-for cycles, as dlock deadlocks does.
func (u *uiServer) deadlocks(ctx context.Context) ([]deadlockJSON, error) {
	found, err := u.s.clients[0].Deadlocks(ctx)
	if err != nil {
		return nil, err
	}
	out := []deadlockJSON{}
	for _, d := range found {
		out = append(out, deadlockJSONOf(d))
	}
	return out, nil
}
