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
// than the writer's, or the same token from another holder: a newer
// holder has written since, and the writer, whatever it believes, no
// longer holds the lock. Nothing was written.
var ErrStaleToken = errors.New("dlock: stale fencing token")

// Fence is what a storage check needs to know of a writer: the fencing
// token of the lock it holds and the holder that got it. The checks
// (FencedSet, FencedHSet, CheckToken) accept a write whose token is above
// every token the resource has seen, or equal to the last one and from
// the same holder (that holder writing again).
//
// The holder matters because a token alone can be handed out twice: in a
// split brain two masters grant at the same time, and two grants in the
// same microsecond get the same token (docs/safety.md). Get a lock's
// Fence with FenceOf; build one by hand only from a token and an owner
// passed on from a lock context (the dlock command's DLOCK_TOKEN and
// DLOCK_OWNER, an Election's LeaderInfo.Token and the leader's owner).
type Fence struct {
	Token  int64  // the lock's fencing token (Token), positive
	Holder string // who holds it: the lock's owner (Client.Owner), not empty
}

// FenceOf returns the Fence of the innermost fenced lock whose lock
// context ctx is or descends from: its token and its owner. It returns
// the zero Fence when there is none (the lock was taken without
// WithFencing), which the storage checks refuse with ErrInvalidOption, so
// that the common call is one line:
//
//	err := dlock.FencedSet(ctx, rdb, dlock.FenceOf(lockCtx), key, value, 0)
//
// Take every lock that guards a resource WithFencing: the lock context
// of an unfenced lock B taken inside a fenced lock A's carries A's Fence,
// which FenceOf returns for B too: a write checked with it is fenced by
// A's token, not B's.
func FenceOf(ctx context.Context) Fence {
	f, _ := ctx.Value(fenceKey{}).(Fence)
	return f
}

// fenceSuffix names the key a fenced write keeps its token in, beside the
// value's key and in the same cluster hash slot.
const fenceSuffix = "dlock_fence"

// FenceKey returns the key in which FencedSet and FencedHSet keep the
// highest token written to key and its holder ("<token> <holder>"):
// "<key>:dlock_fence", or "{key}:dlock_fence" when key has no hash tag, so
// that both are in the same cluster slot. Delete it with the value only
// when no holder of an older token can still write.
//
// The value was the token alone before the holder was added: upgrade
// every fenced writer of a key together, since an older dlock's fenced
// write fails with a script error once a newer one has written the key.
func FenceKey(key string) string { return layout.Suffixed(key, fenceSuffix) }

// FencedSet sets key to value (SET, expiring after ttl when ttl > 0)
// only if f's token is above the highest token a fenced write to key has
// carried, or equal to it and from the same holder; it returns an error
// wrapping ErrStaleToken otherwise, and writes nothing. The check and the
// write are one script on rdb (the Redis that keeps the data, the lock's
// or another). The token and its holder are kept in FenceKey(key), with
// no lifetime. An equal token from the same holder is that holder writing
// again; from another holder it is a second grant of the same token (a
// split brain, docs/safety.md) and is refused.
//
// Pass the Fence of the lock context that protects key (FenceOf); use the
// fenced writes for every write to key, or an unfenced one can overwrite
// a fenced one. A token must be positive and at most 2^53 (the check
// runs in Lua, whose numbers are doubles), and the holder not empty;
// others are refused with ErrInvalidOption. Writers of older dlock
// versions keep the token alone in the fence key: upgrade them all
// together (see FenceKey).
//
// The fence key is never evicted by dlock, but Redis evicts keys without
// a lifetime under the allkeys-* maxmemory policies, and an evicted fence
// key lets a stale writer back in: on the Redis that keeps the data use
// maxmemory-policy noeviction (the default) or a volatile-* policy.
func FencedSet(ctx context.Context, rdb redis.Scripter, f Fence, key string, value any, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: FencedSet %q: negative ttl %v", ErrInvalidOption, key, ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	return fencedWrite(ctx, rdb, f, key, "set", ms, value)
}

// FencedHSet sets the fields of the hash key (HSET; values are field,
// value, field, value...) only if f passes the check FencedSet makes; it returns an
// error wrapping ErrStaleToken otherwise, and writes nothing. When the
// HSET fails (key holds another type), the fence key is left as it was.
func FencedHSet(ctx context.Context, rdb redis.Scripter, f Fence, key string, values ...any) error {
	if len(values) == 0 || len(values)%2 != 0 {
		return fmt.Errorf("%w: FencedHSet %q: want field, value pairs, got %d values", ErrInvalidOption, key, len(values))
	}
	return fencedWrite(ctx, rdb, f, key, "hset", 0, values...)
}

// fencedWrite runs the fenced write script: op "set" or "hset", ms the
// SET lifetime (0 for none), args the value or the field-value pairs.
func fencedWrite(ctx context.Context, rdb redis.Scripter, f Fence, key, op string, ms int64, args ...any) error {
	if err := checkFence(f); err != nil {
		return fmt.Errorf("dlock: fenced write to %q: %w", key, err)
	}
	if key == "" {
		return fmt.Errorf("%w: fenced write: empty key", ErrInvalidOption)
	}
	argv := append([]any{f.Token, f.Holder, op, ms}, args...)
	res, err := scripts.FencedWrite.Run(ctx, rdb, []string{key, FenceKey(key)}, argv...).Int64Slice()
	if err != nil {
		return fmt.Errorf("dlock: fenced write to %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("dlock: fenced write to %q: unexpected reply %v", key, res)
	}
	if res[0] != 1 {
		return fmt.Errorf("%w: %q: token %d of %s, the resource has seen %d", ErrStaleToken, key, f.Token, f.Holder, res[1])
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

// checkFence refuses a token that no fenced lock hands out, one that the
// Redis check could not compare exactly, and a fence without a holder.
func checkFence(f Fence) error {
	token := f.Token
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d is not positive (was the lock taken WithFencing?)", ErrInvalidOption, token)
	}
	if token > maxFenceToken {
		return fmt.Errorf("%w: fencing token %d is above 2^53, which the fence check cannot compare exactly", ErrInvalidOption, token)
	}
	if f.Holder == "" {
		return fmt.Errorf("%w: fencing token %d has no holder (use dlock.FenceOf(lockCtx))", ErrInvalidOption, token)
	}
	return nil
}

// DefaultFenceTable is the table CheckToken keeps its tokens in.
const DefaultFenceTable = "dlock_fence"

// SQLFence is the storage check for SQL databases, over database/sql
// without a driver of its own: a table with one row per resource holding
// the highest fencing token that wrote to it and that token's holder. The SQL is PostgreSQL's
// (INSERT ... ON CONFLICT, $1 placeholders), which CockroachDB and
// YugabyteDB speak too; it is tested against PostgreSQL.
//
// The zero value uses DefaultFenceTable. The table is
//
//	CREATE TABLE IF NOT EXISTS dlock_fence (
//		resource text PRIMARY KEY,
//		token bigint NOT NULL,
//		holder text NOT NULL DEFAULT ''
//	)
//
// (Create makes it, and adds the holder column to a table made without
// it).
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

// Create creates the fence table if it does not exist, and adds the
// holder column if the table lacks it (made by an earlier dlock).
//
// On a table that has the column already, Create takes no lock on it, so
// it can run at every start of a program while other programs' Check
// transactions are open. Adding the column takes the table's ACCESS
// EXCLUSIVE lock (and needs its ownership): Create waits for it at most
// fenceAlterLockTimeout (2 s, PostgreSQL's lock_timeout for that
// statement only), so that Checks on the table queue behind it no longer
// than that, and fails with PostgreSQL's lock timeout error when open
// transactions use the table for longer; run it again when they are done.
func (f SQLFence) Create(ctx context.Context, db SQLExecer) error {
	table, err := f.table()
	if err != nil {
		return err
	}
	create := "CREATE TABLE IF NOT EXISTS " + table + " (resource text PRIMARY KEY, token bigint NOT NULL, holder text NOT NULL DEFAULT '')"
	if _, err := db.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("dlock: creating the fence table %s: %w", table, err)
	}
	if _, err := db.ExecContext(ctx, addHolderColumn(table)); err != nil {
		return fmt.Errorf("dlock: adding the holder column to the fence table %s: %w", table, err)
	}
	return nil
}

// fenceAlterLockTimeout bounds Create's wait for the lock that adding the
// holder column takes.
const fenceAlterLockTimeout = "2s"

// addHolderColumn is the statement that adds the holder column to table
// when it lacks it, and otherwise does nothing. It looks in the catalog
// first because ALTER TABLE ... ADD COLUMN IF NOT EXISTS takes ACCESS
// EXCLUSIVE before it looks at IF NOT EXISTS: it would wait for every open
// transaction that ran a Check, and every new Check would wait behind it.
// The lock_timeout it sets is given back before the block ends, so a
// caller's transaction keeps its own. table is a checked identifier
// (SQLFence.table), safe to put in the text.
func addHolderColumn(table string) string {
	return `DO $dlock$
DECLARE
  previous text := current_setting('lock_timeout');
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('` + table + `') AND attname = 'holder' AND NOT attisdropped) THEN
    PERFORM set_config('lock_timeout', '` + fenceAlterLockTimeout + `', true);
    ALTER TABLE ` + table + ` ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT '';
    PERFORM set_config('lock_timeout', previous, true);
  END IF;
END
$dlock$`
}

// Check records f's token and holder as the newest for resource, inside
// the caller's transaction tx, and returns an error wrapping
// ErrStaleToken, having changed nothing, when the table already holds a
// higher token for it, or the same token from another holder (the rule
// of Fence). Run it
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
func (f SQLFence) Check(ctx context.Context, tx *sql.Tx, resource string, fence Fence) error {
	table, err := f.table()
	if err != nil {
		return err
	}
	if err := checkFence(fence); err != nil {
		return fmt.Errorf("dlock: fence check of %q: %w", resource, err)
	}
	if tx == nil {
		return fmt.Errorf("%w: fence check of %q: nil transaction", ErrInvalidOption, resource)
	}
	q := "INSERT INTO " + table + " AS f (resource, token, holder) VALUES ($1, $2, $3) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder " +
		"WHERE f.token < EXCLUDED.token OR (f.token = EXCLUDED.token AND f.holder = EXCLUDED.holder)"
	res, err := tx.ExecContext(ctx, q, resource, fence.Token, fence.Holder)
	if err != nil {
		return fmt.Errorf("dlock: fence check of %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("dlock: fence check of %q: %w", resource, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q: token %d of %s, the fence table %s holds a higher one or the same from another holder", ErrStaleToken, resource, fence.Token, fence.Holder, table)
	}
	return nil
}

// CheckToken is SQLFence{}.Check: it records f as the newest for
// resource in DefaultFenceTable inside tx, or returns an error wrapping
// ErrStaleToken when a higher token, or the same token from another
// holder, has written to resource.
func CheckToken(ctx context.Context, tx *sql.Tx, resource string, f Fence) error {
	return SQLFence{}.Check(ctx, tx, resource, f)
}
