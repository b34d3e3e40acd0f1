package dlock

// This file is the storage side of fencing. A lease lock cannot promise
// that its holder is alone: a holder paused past its lease, or a failover
// that lost the lock, lets two clients believe they hold it. The fencing
// token (WithFencing, Token) tells them apart, but only the storage can
// act on it, by refusing a write whose token is below one it has already
// seen. These helpers do that check and the write in one step, for data
// kept in Redis (FencedSet, FencedHSet) and for SQL databases
// (CheckToken, SQLFence), so that users need not write it themselves.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// ErrStaleToken is returned by the fenced writes (FencedSet, FencedHSet,
// CheckToken) when the resource has already seen a higher fencing token
// than the writer's: a newer holder has written since, and the writer,
// whatever it believes, no longer holds the lock. Nothing was written.
var ErrStaleToken = errors.New("dlock: stale fencing token")

// fenceSuffix names the key a fenced write keeps its token in, beside the
// value's key and in the same cluster hash slot.
const fenceSuffix = "dlock_fence"

// FenceKey returns the key in which FencedSet and FencedHSet keep the
// highest token written to key: "<key>:dlock_fence", or "{key}:dlock_fence"
// when key has no hash tag, so that both are in the same cluster slot.
// Delete it with the value only when no holder of an older token can
// still write.
func FenceKey(key string) string { return layout.Suffixed(key, fenceSuffix) }

// FencedSet sets key to value (SET, expiring after ttl when ttl > 0)
// only if token is not below the highest token a fenced write to key has
// carried; it returns an error wrapping ErrStaleToken otherwise, and
// writes nothing. The check and the write are one script on rdb (the
// Redis that keeps the data, the lock's or another). The token is kept
// in FenceKey(key), with no lifetime. An equal token is let through: it
// is the same holder writing again (every acquisition takes a new one).
//
// Pass the token of the lock context (Token) that protects key; use the
// fenced writes for every write to key, or an unfenced one can overwrite
// a fenced one. A token must be positive and at most 2^53 (the check
// runs in Lua, whose numbers are doubles); others are refused with
// ErrInvalidOption.
//
// The fence key is never evicted by dlock, but Redis evicts keys without
// a lifetime under the allkeys-* maxmemory policies, and an evicted fence
// key lets a stale writer back in: on the Redis that keeps the data use
// maxmemory-policy noeviction (the default) or a volatile-* policy.
func FencedSet(ctx context.Context, rdb redis.Scripter, token int64, key string, value any, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: FencedSet %q: negative ttl %v", ErrInvalidOption, key, ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	return fencedWrite(ctx, rdb, token, key, "set", ms, value)
}

// FencedHSet sets the fields of the hash key (HSET; values are field,
// value, field, value...) only if token is not below the highest token a
// fenced write to key has carried, as FencedSet does; it returns an
// error wrapping ErrStaleToken otherwise, and writes nothing. When the
// HSET fails (key holds another type), the fence key is left as it was.
func FencedHSet(ctx context.Context, rdb redis.Scripter, token int64, key string, values ...any) error {
	if len(values) == 0 || len(values)%2 != 0 {
		return fmt.Errorf("%w: FencedHSet %q: want field, value pairs, got %d values", ErrInvalidOption, key, len(values))
	}
	return fencedWrite(ctx, rdb, token, key, "hset", 0, values...)
}

// fencedWrite runs the fenced write script: op "set" or "hset", ms the
// SET lifetime (0 for none), args the value or the field-value pairs.
func fencedWrite(ctx context.Context, rdb redis.Scripter, token int64, key, op string, ms int64, args ...any) error {
	if err := checkToken(token); err != nil {
		return fmt.Errorf("dlock: fenced write to %q: %w", key, err)
	}
	if key == "" {
		return fmt.Errorf("%w: fenced write: empty key", ErrInvalidOption)
	}
	argv := append([]any{token, op, ms}, args...)
	res, err := scripts.FencedWrite.Run(ctx, rdb, []string{key, FenceKey(key)}, argv...).Int64Slice()
	if err != nil {
		return fmt.Errorf("dlock: fenced write to %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("dlock: fenced write to %q: unexpected reply %v", key, res)
	}
	if res[0] != 1 {
		return fmt.Errorf("%w: %q: token %d, the resource has seen %d", ErrStaleToken, key, token, res[1])
	}
	return nil
}

// maxFenceToken is the highest token the fenced writes (FencedSet,
// FencedHSet, CheckToken) accept: 2^53. The Redis check runs in Lua,
// whose numbers are doubles, exact only up to 2^53; above it two
// different tokens could compare equal and both be let through. The
// tokens dlock hands out (microseconds since the epoch, about 2^50.6 in
// 2025) stay below it until the year 2255.
const maxFenceToken = 1 << 53

// checkToken refuses a token that no fenced lock hands out, and one that
// the Redis check could not compare exactly.
func checkToken(token int64) error {
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d is not positive (was the lock taken WithFencing?)", ErrInvalidOption, token)
	}
	if token > maxFenceToken {
		return fmt.Errorf("%w: fencing token %d is above 2^53, which the fence check cannot compare exactly", ErrInvalidOption, token)
	}
	return nil
}

// DefaultFenceTable is the table CheckToken keeps its tokens in.
const DefaultFenceTable = "dlock_fence"

// SQLFence is the storage check for SQL databases, over database/sql
// without a driver of its own: a table with one row per resource holding
// the highest fencing token that wrote to it. The SQL is PostgreSQL's
// (INSERT ... ON CONFLICT, $1 placeholders), which CockroachDB and
// YugabyteDB speak too; it is tested against PostgreSQL.
//
// The zero value uses DefaultFenceTable. The table is
//
//	CREATE TABLE IF NOT EXISTS dlock_fence (
//		resource text PRIMARY KEY,
//		token bigint NOT NULL
//	)
//
// (Create makes it).
type SQLFence struct {
	// Table is the fence table's name, optionally schema-qualified
	// (letters, digits and underscores); "" is DefaultFenceTable. It goes
	// into the SQL unquoted, so PostgreSQL folds it to lower case, and a
	// reserved word (user, order...) is a syntax error.
	Table string
}

// identifier is what SQLFence accepts as a table name: it goes into the
// SQL text, so only plain identifiers.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func (f SQLFence) table() (string, error) {
	if f.Table == "" {
		return DefaultFenceTable, nil
	}
	if !identifier.MatchString(f.Table) {
		return "", fmt.Errorf("%w: fence table name %q: want letters, digits and underscores, optionally schema.table", ErrInvalidOption, f.Table)
	}
	return f.Table, nil
}

// SQLExecer is what Create needs: a *sql.DB, *sql.Conn or *sql.Tx.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Create creates the fence table if it does not exist.
func (f SQLFence) Create(ctx context.Context, db SQLExecer) error {
	table, err := f.table()
	if err != nil {
		return err
	}
	q := "CREATE TABLE IF NOT EXISTS " + table + " (resource text PRIMARY KEY, token bigint NOT NULL)"
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("dlock: creating the fence table %s: %w", table, err)
	}
	return nil
}

// Check records token as the newest for resource, inside the caller's
// transaction tx, and returns an error wrapping ErrStaleToken, having
// changed nothing, when the table already holds a higher token for it.
// An equal token is let through (the same holder writing again). Run it
// in the transaction that makes the protected writes, before them, and
// roll back when it fails: its row stays locked until tx ends, so a
// newer holder's Check waits for tx, and once tx has committed an older
// holder's Check fails.
//
// That wait has no end of its own: an older holder that stalls inside its
// transaction blocks the newer holder's Check for as long. Bound it on
// the session or transaction: SET lock_timeout (the waiting Check fails)
// and idle_in_transaction_session_timeout (the server ends the stalled
// transaction, which rolls back its writes).
//
// Isolation: READ COMMITTED (PostgreSQL's default) is enough, because
// the upsert reads the latest committed row and locks it. Under
// REPEATABLE READ or SERIALIZABLE a Check that races with another may
// fail with a serialization error instead (returned wrapped, not as
// ErrStaleToken): roll back and retry the transaction, as those levels
// require.
func (f SQLFence) Check(ctx context.Context, tx *sql.Tx, resource string, token int64) error {
	table, err := f.table()
	if err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return fmt.Errorf("dlock: fence check of %q: %w", resource, err)
	}
	if tx == nil {
		return fmt.Errorf("%w: fence check of %q: nil transaction", ErrInvalidOption, resource)
	}
	q := "INSERT INTO " + table + " AS f (resource, token) VALUES ($1, $2) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token"
	res, err := tx.ExecContext(ctx, q, resource, token)
	if err != nil {
		return fmt.Errorf("dlock: fence check of %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("dlock: fence check of %q: %w", resource, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q: token %d, the fence table %s holds a higher one", ErrStaleToken, resource, token, table)
	}
	return nil
}

// CheckToken is SQLFence{}.Check: it records token as the newest for
// resource in DefaultFenceTable inside tx, or returns an error wrapping
// ErrStaleToken when a higher token has written to resource.
func CheckToken(ctx context.Context, tx *sql.Tx, resource string, token int64) error {
	return SQLFence{}.Check(ctx, tx, resource, token)
}
