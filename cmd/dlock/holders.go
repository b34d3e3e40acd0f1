package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/redis/go-redis/v9"
)

// clientInfo is what a dlock Client's holder record says about the process
// that holds a lock (the library's clientinfo.go writes it).
type clientInfo struct {
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Program string `json:"program"`
	// Name is the Client's label (WithClientName); dlock run and hold set
	// it to their command.
	Name string `json:"name,omitempty"`
	// Started is when the holder's Client was created, RFC 3339.
	Started string `json:"started"`
}

// unknownHolder is what a holder without a readable record is: a Redisson
// client, or a dlock Client whose record is gone (it exited, or it could
// not write the record).
const unknownHolder = "unknown (another client)"

// clientID is the id of the Client an owner name belongs to: the part
// before its last colon ("<clientID>:<n>", Redisson's "<uuid>:<threadId>").
func clientID(owner string) string {
	if i := strings.LastIndexByte(owner, ':'); i > 0 {
		return owner[:i]
	}
	return owner
}

// addClients fills in, for every holder of the locks, its Client's holder
// record, read with one pipeline per server. The record is looked up on
// rdbs in order: a RedLock's Client writes it on its first server only,
// while its owner holds the lock on each. A record that is missing or
// cannot be read leaves the holder without one, and never fails the
// command: when Redis refused the read, the holder keeps why, for the
// text output.
func addClients(ctx context.Context, rdbs []redis.UniversalClient, locks []lockState) {
	found := map[string]*clientInfo{}
	refused := map[string]string{}
	for _, rdb := range rdbs {
		cmds := map[string]*redis.MapStringStringCmd{}
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, st := range locks {
				for _, owner := range st.owners() {
					id := clientID(owner)
					if found[id] == nil && cmds[id] == nil {
						cmds[id] = p.HGetAll(ctx, layout.ClientRecordPrefix+id)
					}
				}
			}
			return nil
		})
		for id, cmd := range cmds {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				if _, ok := refused[id]; !ok {
					refused[id] = err.Error()
				}
				continue
			}
			if ci := parseRecord(cmd.Val()); ci != nil {
				found[id] = ci
				delete(refused, id)
			}
		}
		if len(cmds) == 0 {
			break
		}
	}
	for i := range locks {
		for j := range locks[i].Holders {
			h := &locks[i].Holders[j]
			id := clientID(h.Owner)
			h.Client, h.clientErr = found[id], refused[id]
		}
		for j := range locks[i].Queue {
			w := &locks[i].Queue[j]
			id := clientID(w.Owner)
			w.Client, w.clientErr = found[id], refused[id]
			_, dlockOwner := layout.OwnerClientID(w.Owner)
			w.Gone = dlockOwner && w.Client == nil && w.clientErr == "" && seen(ctx, rdbs, id)
		}
	}
}

// seen reports whether the Client id is in the seen set of a server in
// rdbs: its record was written once, so a missing record means that it
// died or closed. A dlock Client never seen (one whose ACL forbids the
// record) is not gone: its waiters keep Redisson's deadline, and the
// library does not drop them either.
func seen(ctx context.Context, rdbs []redis.UniversalClient, id string) bool {
	for _, rdb := range rdbs {
		if err := rdb.ZScore(ctx, layout.ClientSeenKey, id).Err(); err == nil {
			return true
		}
	}
	return false
}

// owners is everyone whose record addClients reads: the holders and the
// fair queue's waiters.
func (st lockState) owners() []string {
	var owners []string
	for _, h := range st.Holders {
		owners = append(owners, h.Owner)
	}
	for _, w := range st.Queue {
		owners = append(owners, w.Owner)
	}
	return owners
}

// parseRecord reads a holder record's fields; nil when there is no record,
// or when it lacks the host or pid.
func parseRecord(f map[string]string) *clientInfo {
	pid, err := strconv.Atoi(f[layout.RecordPID])
	if err != nil || f[layout.RecordHost] == "" {
		return nil
	}
	return &clientInfo{
		Host:    f[layout.RecordHost],
		PID:     pid,
		Program: f[layout.RecordProgram],
		Name:    f[layout.RecordName],
		Started: f[layout.RecordStarted],
	}
}

// clientText describes a holder for people: its program and label, host,
// pid and when its Client started, long (status, the unlock prompt) or
// short (list: when it started only as an age), or why it is unknown.
// Text from Redis is printed with control characters escaped.
func (h holder) clientText(now time.Time, long bool) string {
	return describeClient(h.Client, h.clientErr, now, long)
}

// goneWaiter is what a dlock waiter whose holder record is gone is.
const goneWaiter = "gone (no holder record: its process died or closed; the next dlock waiter drops it)"

// clientText describes a waiter as holder.clientText does a holder, or
// says that a dlock waiter is gone.
func (w waiter) clientText(now time.Time) string {
	if w.Gone {
		return goneWaiter
	}
	return describeClient(w.Client, w.clientErr, now, true)
}

// describeClient is clientText of a holder or waiter whose record is ci,
// or which Redis refused to read with clientErr.
func describeClient(ci *clientInfo, clientErr string, now time.Time, long bool) string {
	if ci == nil {
		if clientErr != "" {
			return "unknown (record not readable: " + printable(firstLine(clientErr)) + ")"
		}
		return unknownHolder
	}
	what := printable(ci.Program)
	if what == "" {
		what = "?"
	}
	if ci.Name != "" && ci.Name != ci.Program {
		what += " " + strconv.Quote(ci.Name)
	}
	s := fmt.Sprintf("%s on %s, pid %d", what, printable(ci.Host), ci.PID)
	started, err := time.Parse(time.RFC3339Nano, ci.Started)
	switch {
	case err != nil:
	case long:
		s += ", started " + started.UTC().Format(time.RFC3339) + ", " + agoText(now.Sub(started))
	default:
		s += ", started " + agoText(now.Sub(started))
	}
	return s
}

// agoText says how long ago something was: "3m12s ago".
func agoText(d time.Duration) string {
	if d < 0 {
		return "just now" // by a clock behind the holder's
	}
	return durationText(d.Milliseconds()) + " ago"
}

// printable escapes control and other non-printable characters, so that
// a record written by anyone cannot move the cursor or change colours.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
