package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRunOnceErrorReplyIsNotNoReply: a script that must run at most once
// (transport.RunOnce) and that Redis answers with an error reply got its
// reply: the error is Redis's (here WRONGTYPE: the semaphore's key is a
// hash), not ErrNoReply, which would tell the caller that the operation
// may have been applied and send it looking for a lost reply.
func TestRunOnceErrorReplyIsNotNoReply(t *testing.T) {
	ctx := boundedCtx(t, 30*time.Second)
	name := lockName(t)
	c := newClient(t, nil)
	if err := c.rdb.HSet(ctx, name, "f", 1).Err(); err != nil {
		t.Fatal(err)
	}
	s := mustSemaphore(t, c, name)
	for _, op := range []struct {
		what string
		call func() error
	}{
		{"Release", func() error { return s.Release(ctx, 1) }},
		{"TryAcquire", func() error { _, err := s.TryAcquire(ctx, 1); return err }},
	} {
		err := op.call()
		var reply redis.Error
		switch {
		case err == nil:
			t.Errorf("%s of a hash key: no error", op.what)
		case errors.Is(err, ErrNoReply):
			t.Errorf("%s of a hash key: %v, an error reply reported as ErrNoReply", op.what, err)
		case !errors.As(err, &reply) || !strings.Contains(reply.Error(), "WRONGTYPE"):
			t.Errorf("%s of a hash key: %v, want Redis's WRONGTYPE reply", op.what, err)
		}
	}
}
