package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestHandOverMinimalACL: the release after handoffBound (4) hand-overs in
// a row asks PUBSUB NUMSUB in the script (lock_release_to.lua) whether
// another process waits. Five goroutines of one Client queue behind a
// sixth; the only other subscriber watches the channel by pattern, which
// NUMSUB does not count, so no other process waits:
//
//   - "minimal": under the documented minimal ACL (no +pubsub) the
//     script's PUBSUB is refused (ACL LOG shows the denial, from the
//     script); the release must then free the lock and publish (never fail
//     the Unlock), and the waiter it chose gets the lock after the
//     message: releases 1-4 hand over, 5 and 6 publish.
//   - "with +pubsub": NUMSUB runs and counts this Client's one
//     subscription only, so release 5 hands over too: releases 1-5 hand
//     over, 6 (nobody queued) publishes.
func TestHandOverMinimalACL(t *testing.T) {
	for _, pubsub := range []bool{false, true} {
		t.Run(map[bool]string{false: "minimal", true: "with +pubsub"}[pubsub], func(t *testing.T) {
			ctx := context.Background()
			admin := newRedis(t)
			user := "dlock-acl-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
			perms := slices.Clone(minimalACL)
			if pubsub {
				perms = append(perms, "+pubsub")
			}
			if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, perms...)...).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Do(ctx, "ACL", "DELUSER", user) })
			rdb := redis.NewClient(&redis.Options{Addr: redisAddr, Username: user, Password: "secret"})
			// Closed after the dlock Client, whose Close newClient registers
			// later (cleanups run last in, first out).
			t.Cleanup(func() { _ = rdb.Close() })
			m := mustMutex(t, newClient(t, rdb), "app:"+lockName(t))
			w := watchPublishes(t, m.kind.channel(""), false)
			first := mustLock(t, ctx, m)
			pubs, order := handChain(t, m, first, nil, 5, w)
			want := []bool{false, false, false, false, !pubsub, true}
			if !slices.Equal(pubs, want) {
				t.Errorf("releases that published (freed the lock): %v, want %v; order of the Locks %v", pubs, want, order)
			}
			denied := numsubDenials(t, admin, user)
			switch {
			case !pubsub && denied == 0:
				t.Error("ACL LOG shows no PUBSUB refused to the hand-over script: the NUMSUB branch did not run")
			case pubsub && denied != 0:
				t.Errorf("ACL LOG shows %d PUBSUB refusals for a user with +pubsub", denied)
			}
		})
	}
}

// numsubDenials counts the entries of ACL LOG for user that refused a
// PUBSUB command sent by a script.
func numsubDenials(t *testing.T, admin *redis.Client, user string) int {
	t.Helper()
	entries, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		f := map[string]string{}
		switch e := e.(type) {
		case map[any]any: // RESP3
			for k, v := range e {
				f[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		case []any: // RESP2
			for i := 0; i+1 < len(e); i += 2 {
				f[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
			}
		}
		if f["username"] == user && f["context"] == "lua" && strings.HasPrefix(f["object"], "pubsub") {
			n++
		}
	}
	return n
}
