package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestViewsCountEveryWaiter: a mutex held, with a mutex waiter (on the
// unlock channel) and a fair waiter (in the fair queue) on the same name:
// top counts both waiters, and status and list show the ones top shows.
func TestViewsCountEveryWaiter(t *testing.T) {
	name := lockName(t)
	rdb := newRedis(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	lockCtx := mustLock(t, m, t.Context())
	defer func() { _ = m.Unlock(lockCtx) }()
	waitingClient(t, name, "mutex")
	waitingClient(t, name, "fair")
	channel := "redisson_lock__channel:{" + name + "}"
	eventually(t, 10*time.Second, func() error {
		n := rdb.PubSubNumSub(t.Context(), channel).Val()[channel]
		q := rdb.LLen(t.Context(), "redisson_lock_queue:{"+name+"}").Val()
		if n != 1 || q != 1 {
			return fmt.Errorf("%d subscribed to %s, %d queued", n, channel, q)
		}
		return nil
	})

	r := cliRun(t, "top", "--once", "--json", name)
	var rows []topLock
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != 0 || len(rows) != 1 {
		t.Fatalf("top --once --json: exit %d, %v in %s", r.code, err, r.stdout)
	}
	if rows[0].Waiters != 2 || rows[0].Subscribed != 1 || len(rows[0].Queue) != 1 {
		t.Errorf("top: %d waiters (%d subscribed, %d queued), want 2 (1 and 1)", rows[0].Waiters, rows[0].Subscribed, len(rows[0].Queue))
	}

	r = cliRun(t, "status", "--json", name)
	var st lockState
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: exit %d, %v in %s", r.code, err, r.stdout)
	}
	if st.Subscribed != 1 || len(st.Queue) != 1 {
		t.Errorf("status --json: %d subscribed, %d queued; want 1 and 1:\n%s", st.Subscribed, len(st.Queue), r.stdout)
	}
	r = cliRun(t, "status", name)
	if !regexp.MustCompile(`(?m)^waiting +1 process subscribed to its unlock channel \(mutex or read-write waiters\)$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "1  "+st.Queue[0].Owner) {
		t.Errorf("status: want the subscribed waiter and the queued one:\n%s", r.stdout)
	}

	r = cliRun(t, "list", name)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +\S+ +1, 2 waiting `).MatchString(r.stdout) {
		t.Errorf("list: want 1 holder, 2 waiting:\n%s", r.stdout)
	}
	r = cliRun(t, "list", "--json", name)
	var locks []lockState
	if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil || len(locks) != 1 || locks[0].Subscribed != 1 {
		t.Errorf("list --json: %v, want one lock with 1 subscribed: %s", err, r.stdout)
	}
}
