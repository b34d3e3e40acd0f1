package dlockrueidis

// The core reads replies as go-redis values (internal/driver): this file
// turns rueidis's results into them, and dlock's script arguments into the
// strings rueidis sends.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// replyError is an error reply from Redis as go-redis reports one: a
// redis.Error, so that the core's checks (NOSCRIPT, MOVED, TRYAGAIN,
// NOPERM, ...) read it as they read go-redis's.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// convErr returns err as go-redis would: redis.Nil for a nil reply, a
// redis.Error for an error reply, anything else as it is.
func convErr(err error) error {
	if err == nil {
		return nil
	}
	if rueidis.IsRedisNil(err) {
		return redis.Nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return replyError(re.Error())
	}
	return err
}

// isReply reports an error that Redis sent as its answer.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// toCmd returns res as a go-redis *redis.Cmd: integers as int64, strings
// as string, arrays as []any (nil elements as nil), as go-redis reads them.
func toCmd(ctx context.Context, res rueidis.RedisResult) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	v, err := res.ToAny()
	if err != nil {
		cmd.SetErr(convErr(err))
		return cmd
	}
	cmd.SetVal(v)
	return cmd
}

// str formats one script argument as go-redis writes it.
func str(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Duration:
		return strconv.FormatInt(int64(v), 10)
	case nil:
		return ""
	}
	return fmt.Sprint(a)
}

func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = str(a)
	}
	return out
}
