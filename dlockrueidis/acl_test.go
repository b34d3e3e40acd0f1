package dlockrueidis_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/redis/rueidis"
)

// TestSubscriptionRefusedIsLogged: as on go-redis (the root package's
// test of that name), a SUBSCRIBE that Redis refuses (NOPERM: the ACL
// user may not use the lock's channel) is reported through the Client's
// logger, and the waiter still takes the lock when the holder's lease
// runs out. A refusal the driver dropped would leave the waiter waiting
// for a confirmation that never comes, and nobody told why.
func TestSubscriptionRefusedIsLogged(t *testing.T) {
	ctx := boundedCtx(t, time.Minute)
	admin := newRedis(t)
	user := "dlock-rueidis-nochan"
	// Every command and key, no channel.
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">secret", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, Username: user, Password: "secret", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	var logs syncBuf
	c, err := dlockrueidis.New(rc, dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	name := testName(t)
	t.Cleanup(func() { admin.Del(context.Background(), name) })
	// The holder loses its lock, as it should: not logged.
	holder := must(newGoRedisClient(t, dlock.WithLogger(slog.New(slog.DiscardHandler))).NewMutex(name, dlock.WithLease(time.Second)))
	if _, err := holder.Lock(ctx); err != nil { // never unlocked: it expires
		t.Fatal(err)
	}
	m := must(c.NewMutex(name))
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	l, err := m.Lock(wctx)
	if err != nil {
		t.Fatalf("waiter without channel permission: %v", err)
	}
	_ = m.Unlock(l) // its PUBLISH is refused too
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := logs.String()
		if strings.Contains(s, "subscription refused") && strings.Contains(s, "NOPERM") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing logged about the refused subscription within 10 s: %q", s)
		}
	}
}

// syncBuf is a log destination safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
