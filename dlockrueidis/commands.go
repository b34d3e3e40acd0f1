package dlockrueidis

// The plain commands of internal/driver.Commands on rueidis, each filling
// the go-redis value the core reads.

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

func (d *rdriver) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return d.c.Do(ctx, cmd)
}

func intCmd(ctx context.Context, res rueidis.RedisResult) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx)
	n, err := res.AsInt64()
	cmd.SetVal(n)
	cmd.SetErr(convErr(err))
	return cmd
}

func stringCmd(ctx context.Context, res rueidis.RedisResult) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	s, err := res.ToString()
	cmd.SetVal(s)
	cmd.SetErr(convErr(err))
	return cmd
}

func (d *rdriver) Exists(ctx context.Context, keys ...string) *redis.IntCmd {
	return intCmd(ctx, d.do(ctx, d.c.B().Exists().Key(keys...).Build()))
}

func (d *rdriver) Get(ctx context.Context, key string) *redis.StringCmd {
	return stringCmd(ctx, d.do(ctx, d.c.B().Get().Key(key).Build()))
}

func (d *rdriver) HGet(ctx context.Context, key, field string) *redis.StringCmd {
	return stringCmd(ctx, d.do(ctx, d.c.B().Hget().Key(key).Field(field).Build()))
}

func (d *rdriver) HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd {
	cmd := redis.NewMapStringStringCmd(ctx)
	m, err := d.do(ctx, d.c.B().Hgetall().Key(key).Build()).AsStrMap()
	cmd.SetVal(m)
	cmd.SetErr(convErr(err))
	return cmd
}

func (d *rdriver) HKeys(ctx context.Context, key string) *redis.StringSliceCmd {
	cmd := redis.NewStringSliceCmd(ctx)
	s, err := d.do(ctx, d.c.B().Hkeys().Key(key).Build()).AsStrSlice()
	cmd.SetVal(s)
	cmd.SetErr(convErr(err))
	return cmd
}

// PTTL reports -1 (no expiry) and -2 (no key) as those durations, as
// go-redis does.
func (d *rdriver) PTTL(ctx context.Context, key string) *redis.DurationCmd {
	cmd := redis.NewDurationCmd(ctx, time.Millisecond)
	n, err := d.do(ctx, d.c.B().Pttl().Key(key).Build()).AsInt64()
	if n >= 0 {
		cmd.SetVal(time.Duration(n) * time.Millisecond)
	} else {
		cmd.SetVal(time.Duration(n))
	}
	cmd.SetErr(convErr(err))
	return cmd
}

func (d *rdriver) PExpire(ctx context.Context, key string, exp time.Duration) *redis.BoolCmd {
	cmd := redis.NewBoolCmd(ctx)
	n, err := d.do(ctx, d.c.B().Pexpire().Key(key).Milliseconds(exp.Milliseconds()).Build()).AsInt64()
	cmd.SetVal(n == 1)
	cmd.SetErr(convErr(err))
	return cmd
}

func (d *rdriver) Persist(ctx context.Context, key string) *redis.BoolCmd {
	cmd := redis.NewBoolCmd(ctx)
	n, err := d.do(ctx, d.c.B().Persist().Key(key).Build()).AsInt64()
	cmd.SetVal(n == 1)
	cmd.SetErr(convErr(err))
	return cmd
}

func (d *rdriver) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return intCmd(ctx, d.do(ctx, d.c.B().Del().Key(keys...).Build()))
}

func (d *rdriver) ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd {
	return intCmd(ctx, d.do(ctx, d.c.B().Zrem().Key(key).Member(strs(members)...).Build()))
}

func (d *rdriver) ZRangeWithScores(ctx context.Context, key string, start, stop int64) *redis.ZSliceCmd {
	cmd := redis.NewZSliceCmd(ctx)
	zs, err := d.do(ctx, d.c.B().Zrange().Key(key).Min(strconv.FormatInt(start, 10)).Max(strconv.FormatInt(stop, 10)).Withscores().Build()).AsZScores()
	out := make([]redis.Z, len(zs))
	for i, z := range zs {
		out[i] = redis.Z{Score: z.Score, Member: z.Member}
	}
	cmd.SetVal(out)
	cmd.SetErr(convErr(err))
	return cmd
}

// Scan returns a go-redis ScanCmd whose Iterator fetches the next pages
// through rueidis too.
func (d *rdriver) Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd {
	process := func(ctx context.Context, c redis.Cmder) error {
		sc := c.(*redis.ScanCmd)
		cur, _ := sc.Args()[1].(uint64)
		e, err := d.do(ctx, d.c.B().Scan().Cursor(cur).Match(match).Count(count).Build()).AsScanEntry()
		sc.SetVal(e.Elements, e.Cursor)
		sc.SetErr(convErr(err))
		return sc.Err()
	}
	cmd := redis.NewScanCmd(ctx, process, "scan", cursor, "match", match, "count", count)
	_ = process(ctx, cmd)
	return cmd
}

func (d *rdriver) Ping(ctx context.Context) *redis.StatusCmd {
	cmd := redis.NewStatusCmd(ctx)
	s, err := d.do(ctx, d.c.B().Ping().Build()).ToString()
	cmd.SetVal(s)
	cmd.SetErr(convErr(err))
	return cmd
}

// redis.Scripter, for redis.Script's Run and Eval.

func (d *rdriver) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return toCmd(ctx, d.do(ctx, d.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build()))
}

func (d *rdriver) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return toCmd(ctx, d.do(ctx, d.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build()))
}

func (d *rdriver) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return toCmd(ctx, d.do(ctx, d.c.B().EvalRo().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build()))
}

func (d *rdriver) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return toCmd(ctx, d.do(ctx, d.c.B().EvalshaRo().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build()))
}

func (d *rdriver) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	cmd := redis.NewBoolSliceCmd(ctx)
	ns, err := d.do(ctx, d.c.B().ScriptExists().Sha1(hashes...).Build()).AsIntSlice()
	out := make([]bool, len(ns))
	for i, n := range ns {
		out[i] = n == 1
	}
	cmd.SetVal(out)
	cmd.SetErr(convErr(err))
	return cmd
}

func (d *rdriver) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return stringCmd(ctx, d.do(ctx, d.c.B().ScriptLoad().Script(script).Build()))
}
