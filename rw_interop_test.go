package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's read-write lock scripts exactly as the seeds give them
// (RedissonReadLock and RedissonWriteLock, tryLockInnerAsync and
// unlockInnerAsync, 2018).
var (
	javaReadLock = redis.NewScript("local mode = redis.call('hget', KEYS[1], 'mode'); " +
		"if (mode == false) then " +
		"redis.call('hset', KEYS[1], 'mode', 'read'); " +
		"redis.call('hset', KEYS[1], ARGV[2], 1); " +
		"redis.call('set', KEYS[2] .. ':1', 1); " +
		"redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); " +
		"redis.call('pexpire', KEYS[1], ARGV[1]); " +
		"return nil; " +
		"end; " +
		"if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then " +
		"local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
		"local key = KEYS[2] .. ':' .. ind;" +
		"redis.call('set', key, 1); " +
		"redis.call('pexpire', key, ARGV[1]); " +
		"redis.call('pexpire', KEYS[1], ARGV[1]); " +
		"return nil; " +
		"end;" +
		"return redis.call('pttl', KEYS[1]);")
	javaReadUnlock = redis.NewScript("local mode = redis.call('hget', KEYS[1], 'mode'); " +
		"if (mode == false) then " +
		"redis.call('publish', KEYS[2], ARGV[1]); " +
		"return 1; " +
		"end; " +
		"local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); " +
		"if (lockExists == 0) then " +
		"return nil;" +
		"end; " +
		"local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); " +
		"if (counter == 0) then " +
		"redis.call('hdel', KEYS[1], ARGV[2]); " +
		"end;" +
		"redis.call('del', KEYS[3] .. ':' .. (counter+1)); " +
		"if (redis.call('hlen', KEYS[1]) > 1) then " +
		"local maxRemainTime = -3; " +
		"local keys = redis.call('hkeys', KEYS[1]); " +
		"for n, key in ipairs(keys) do " +
		"counter = tonumber(redis.call('hget', KEYS[1], key)); " +
		"if type(counter) == 'number' then " +
		"for i=counter, 1, -1 do " +
		"local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); " +
		"maxRemainTime = math.max(remainTime, maxRemainTime);" +
		"end; " +
		"end; " +
		"end; " +
		"if maxRemainTime > 0 then " +
		"redis.call('pexpire', KEYS[1], maxRemainTime); " +
		"return 0; " +
		"end;" +
		"if mode == 'write' then " +
		"return 0;" +
		"end; " +
		"end; " +
		"redis.call('del', KEYS[1]); " +
		"redis.call('publish', KEYS[2], ARGV[1]); " +
		"return 1; ")
	javaWriteLock = redis.NewScript("local mode = redis.call('hget', KEYS[1], 'mode'); " +
		"if (mode == false) then " +
		"redis.call('hset', KEYS[1], 'mode', 'write'); " +
		"redis.call('hset', KEYS[1], ARGV[2], 1); " +
		"redis.call('pexpire', KEYS[1], ARGV[1]); " +
		"return nil; " +
		"end; " +
		"if (mode == 'write') then " +
		"if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " +
		"redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
		"local currentExpire = redis.call('pttl', KEYS[1]); " +
		"redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); " +
		"return nil; " +
		"end; " +
		"end;" +
		"return redis.call('pttl', KEYS[1]);")
	javaWriteUnlock = redis.NewScript("local mode = redis.call('hget', KEYS[1], 'mode'); " +
		"if (mode == false) then " +
		"redis.call('publish', KEYS[2], ARGV[1]); " +
		"return 1; " +
		"end;" +
		"if (mode == 'write') then " +
		"local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); " +
		"if (lockExists == 0) then " +
		"return nil;" +
		"else " +
		"local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
		"if (counter > 0) then " +
		"redis.call('pexpire', KEYS[1], ARGV[2]); " +
		"return 0; " +
		"else " +
		"redis.call('hdel', KEYS[1], ARGV[3]); " +
		"if (redis.call('hlen', KEYS[1]) == 1) then " +
		"redis.call('del', KEYS[1]); " +
		"redis.call('publish', KEYS[2], ARGV[1]); " +
		"else " +
		"redis.call('hset', KEYS[1], 'mode', 'read'); " +
		"end; " +
		"return 1; " +
		"end; " +
		"end; " +
		"end; " +
		"return nil;")
)

// javaRW plays one thread of a Redisson client on a read-write lock, with
// the key names Redisson builds for those scripts.
type javaRW struct {
	rdb   *redis.Client
	name  string
	owner string // <uuid>:<threadId>
}

func (j javaRW) channel() string       { return "redisson_rwlock:{" + j.name + "}" }
func (j javaRW) timeoutPrefix() string { return "{" + j.name + "}:" + j.owner + ":rwlock_timeout" }

// result reads a Redisson acquire script's answer: nil when acquired,
// else the lock's pttl.
func javaResult(cmd *redis.Cmd) (acquired bool, pttl int64, err error) {
	pttl, err = cmd.Int64()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	return false, pttl, err
}

func (j javaRW) readLock(ctx context.Context, leaseMs int64) (bool, int64, error) {
	return javaResult(javaReadLock.Run(ctx, j.rdb, []string{j.name, j.timeoutPrefix()}, leaseMs, j.owner, j.owner+":write"))
}

func (j javaRW) readUnlock(ctx context.Context) (int64, error) {
	return javaReadUnlock.Run(ctx, j.rdb, []string{j.name, j.channel(), j.timeoutPrefix(), "{" + j.name + "}"}, 0, j.owner).Int64()
}

func (j javaRW) writeLock(ctx context.Context, leaseMs int64) (bool, int64, error) {
	return javaResult(javaWriteLock.Run(ctx, j.rdb, []string{j.name}, leaseMs, j.owner+":write"))
}

func (j javaRW) writeUnlock(ctx context.Context) (int64, error) {
	return javaWriteUnlock.Run(ctx, j.rdb, []string{j.name, j.channel()}, 0, 30000, j.owner+":write").Int64()
}

// TestRWRedissonInterop: a Java client running Redisson's own read and
// write lock scripts and a Go RWMutex on the same name exclude each other
// as one read-write lock: readers share across languages, a writer on
// either side excludes the other side's readers and writers, and unlock
// messages wake the other side's waiters.
func TestRWRedissonInterop(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	noChannelsLeft(t, name)
	java := javaRW{rdb: newRedis(t), name: name, owner: "5f0b1c2e-8d3a-4e8b-9a51-3c1d2e4f5a6b:1"}
	javaWriter := javaRW{rdb: java.rdb, name: name, owner: "5f0b1c2e-8d3a-4e8b-9a51-3c1d2e4f5a6b:2"}
	gc := newClient(t, nil)
	rw := mustRW(t, gc, name)

	// A Java reader holds: a Go reader shares, a Go writer is refused.
	if ok, _, err := java.readLock(ctx, 30000); !ok || err != nil {
		t.Fatalf("java read lock: %v %v", ok, err)
	}
	gr := mustLock(t, ctx, rw.ReadLock())
	if _, err := rw.WriteLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Go write TryLock while Java reads: %v", err)
	}
	// The Java writer is refused while the Go reader holds, even after the
	// Java reader leaves; the Go reader's unlock then frees the lock.
	if n, err := java.readUnlock(ctx); n != 0 || err != nil {
		t.Fatalf("java read unlock with a Go reader left: %d %v, want 0", n, err)
	}
	if ok, pttl, err := javaWriter.writeLock(ctx, 30000); ok || err != nil || pttl <= 0 {
		t.Fatalf("java write lock while Go reads: %v %d %v", ok, pttl, err)
	}
	if err := rw.ReadLock().Unlock(gr); err != nil {
		t.Fatal(err)
	}
	if n := gc.rdb.Exists(ctx, name).Val(); n != 0 {
		t.Fatalf("lock not freed by the last reader: %v", gc.rdb.HGetAll(ctx, name).Val())
	}

	// A Java writer holds: Go readers and writers are refused; a waiting
	// Go writer is woken by the Java unlock's message.
	if ok, _, err := javaWriter.writeLock(ctx, 30000); !ok || err != nil {
		t.Fatalf("java write lock: %v %v", ok, err)
	}
	if _, err := rw.ReadLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Go read TryLock while Java writes: %v", err)
	}
	if _, err := rw.WriteLock().TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Go write TryLock while Java writes: %v", err)
	}
	got := rwWaiter(t, ctx, gc, rw.WriteLock(), name, 1)
	unlocked := time.Now()
	if n, err := javaWriter.writeUnlock(ctx); n != 1 || err != nil {
		t.Fatalf("java write unlock: %d %v", n, err)
	}
	var gw context.Context
	select {
	case gw = <-got:
		t.Logf("Go writer acquired %v after the Java unlock", time.Since(unlocked))
	case <-time.After(5 * time.Second):
		t.Fatal("Go writer not woken by the Java write unlock")
	}
	if gw == nil {
		t.FailNow()
	}

	// A Go writer holds: Java readers and writers are refused.
	if ok, pttl, err := java.readLock(ctx, 30000); ok || err != nil || pttl <= 0 {
		t.Fatalf("java read lock while Go writes: %v %d %v", ok, pttl, err)
	}
	if ok, _, err := javaWriter.writeLock(ctx, 30000); ok || err != nil {
		t.Fatalf("java write lock while Go writes: %v %v", ok, err)
	}
	if err := rw.WriteLock().Unlock(gw); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := java.readLock(ctx, 30000); !ok || err != nil {
		t.Fatalf("java read lock after the Go writer left: %v %v", ok, err)
	}
	if n, err := java.readUnlock(ctx); n != 1 || err != nil {
		t.Fatalf("java read unlock: %d %v", n, err)
	}
}
