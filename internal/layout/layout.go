// Package layout is the one home of the Redis key layout dlock shares with
// Redisson: the key prefixes, the rule that puts a lock's companion keys in
// its hash slot, the slot function itself, lock-name validation, and the
// fields of a dlock Client's holder record. The library writes this layout;
// cmd/dlock and bench read it.
//
// A lock named N is a hash N whose fields are owners ("<uuid>:<threadId>",
// dlock's "<clientID>:<n>") mapped to hold counts; a read-write lock adds a
// "mode" field ("read" or "write") and names write holds "<owner>:write".
package layout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxNameLen bounds lock names in bytes; Redis would take 512 MB.
const MaxNameLen = 1024

// Key and channel prefixes shared with Redisson. A companion key is
// Prefixed(prefix, name), except the latch channel, which Redisson writes
// as LatchChannelPrefix + "{" + name + "}", braces always.
const (
	LockChannelPrefix  = "redisson_lock__channel"             // Mutex, FairMutex (":<owner>" per fair waiter)
	RWChannelPrefix    = "redisson_rwlock"                    // RWMutex
	TokenPrefix        = "redisson_lock_token"                // the fencing counter
	UnlockLatchPrefix  = "redisson_unlock_latch"              // a force release's outcome
	QueuePrefix        = "redisson_lock_queue"                // FairMutex's queue (a list)
	TimeoutPrefix      = "redisson_lock_timeout"              // FairMutex's deadlines (a zset)
	SemChannelPrefix   = "redisson_sc"                        // Semaphore, PermitSemaphore
	LatchChannelPrefix = "redisson_countdownlatch__channel__" // CountDownLatch
)

// The lock hash's layout beyond owner fields.
const (
	ModeField     = "mode"           // a read-write lock's mode, "read" or "write"
	WriteSuffix   = ":write"         // ends the field counting an owner's write holds
	rwTimeoutPart = "rwlock_timeout" // names an owner's read hold keys
)

// A dlock Client's holder record: the hash ClientRecordPrefix+<clientID>
// with these fields, every value a string. It is written at the Client's
// first lock attempt and deleted at Close. Lock keys do not point to it;
// an owner's client id (the part before the last colon) names it. To write
// its record a Client needs the key pattern ~dlock:client:* (with EVALSHA,
// EVAL, HSET, PEXPIRE, DEL, ZADD, ZREMRANGEBYSCORE, ZREM), and EXISTS and
// ZSCORE to tell dead fair waiters (see OwnerClientID); a tool that reads
// records needs HGETALL on it.
//
// ClientSeenKey is the zset of the client ids whose record was written,
// scored by the time of the last write (ms, the server's clock): a fair
// waiter is taken for dead only when its record is gone and it is there,
// so a Client that never wrote its record (an ACL without the pattern, a
// write that failed, data lost) is never taken for dead. Entries older
// than ClientSeenKeep go at the next refresh of any record; a Client that
// closes removes its own.
const (
	ClientRecordPrefix = "dlock:client:"
	ClientSeenKey      = "dlock:client:seen"
	ClientSeenKeep     = 24 * time.Hour
	RecordHost         = "host"    // os.Hostname
	RecordPID          = "pid"     // os.Getpid, decimal
	RecordProgram      = "program" // the base name of os.Args[0]
	RecordName         = "name"    // WithClientName's label; absent when none
	RecordStarted      = "started" // when New returned the Client: RFC 3339, ms, UTC
)

// OwnerClientID returns the client id of owner when owner is a dlock
// Client's ("<clientID>:<n>", the id a UUID of version 8), and false for
// any other owner, such as Redisson's "<uuid>:<threadId>" (version 4). A
// dlock owner's Client keeps the record ClientRecordPrefix+<clientID>
// while it lives; a Redisson client writes none.
func OwnerClientID(owner string) (string, bool) {
	i := strings.LastIndexByte(owner, ':')
	if i < 0 || !dlockClientID(owner[:i]) {
		return "", false
	}
	if _, err := strconv.ParseUint(owner[i+1:], 10, 64); err != nil {
		return "", false
	}
	return owner[:i], true
}

// dlockClientID reports whether id has the form of a dlock client id: a
// lower-case UUID of version 8 and the RFC 9562 variant.
func dlockClientID(id string) bool {
	if len(id) != 36 || id[14] != '8' || !strings.ContainsRune("89ab", rune(id[19])) {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !('0' <= c && c <= '9' || 'a' <= c && c <= 'f'):
			return false
		}
	}
	return true
}

// Leader election (dlock's own, election.go): an election named N is the
// reentrant lock N (Redisson's layout, so that an RLock on N excludes it)
// plus the hash ElectionPrefix+":{N}", which holds the leader's value and
// revision and lives exactly as long as the leadership, and the channel
// ElectionChannelPrefix+":{N}", on which every change is published.
const (
	ElectionPrefix        = "dlock:election"
	ElectionChannelPrefix = "dlock:election:channel"
)

// Deadlock detection (dlock's own, deadlock.go): the hash
// WaitsPrefix+<clientID> maps each owner of that Client that waits for a
// lock while holding another to what it waits for. It has a TTL, like the
// holder record, and exists only while the Client has such waits. The
// sorted set WaitsIndex names the Clients with a record, each scored by
// its record's expiry (server milliseconds), so that the records are
// found without a SCAN. The hash tag puts the index and every record in
// one cluster slot.
const (
	WaitsIndex  = "dlock:waits:{waits}"
	WaitsPrefix = WaitsIndex + ":"
)

// Prefixed is Redisson's rule for a companion key in front of the name:
// "p:{name}", or "p:name" when the name already carries a hash tag.
func Prefixed(prefix, name string) string {
	return prefix + ":" + HashTag(name)
}

// PrefixedPair is Prefixed(p1, name) and Prefixed(p2, name), sharing one
// allocation (a Client may keep a million such names).
func PrefixedPair(p1, p2, name string) (string, string) {
	tag := HashTag(name)
	both := p1 + ":" + tag + p2 + ":" + tag
	n := len(p1) + 1 + len(tag)
	return both[:n], both[n:]
}

// Suffixed is Redisson's rule for a companion key after the name:
// "{name}:s", or "name:s" when the name already carries a hash tag.
func Suffixed(name, suffix string) string {
	return HashTag(name) + ":" + suffix
}

// HashTag is the part of a lock's companion keys that puts them in its
// cluster slot: "{name}", or the name itself when it has a tag already.
func HashTag(name string) string {
	if strings.Contains(name, "{") {
		return name
	}
	return "{" + name + "}"
}

// WriteField is the lock hash field that counts owner's write holds.
func WriteField(owner string) string { return owner + WriteSuffix }

// ReadHoldPrefix is the prefix of owner's read hold keys on read-write
// lock name: read hold k is "<prefix>:k", whose TTL is its lease.
func ReadHoldPrefix(name, owner string) string {
	return Suffixed(name, owner+":"+rwTimeoutPart)
}

// ReadHoldKey is the key of owner's read hold k on read-write lock name:
// "{N}:<owner>:rwlock_timeout:<k>".
func ReadHoldKey(name, owner string, k int) string {
	return ReadHoldPrefix(name, owner) + ":" + strconv.Itoa(k)
}

// UnlockLatch is the key under which a force release records its outcome
// until its reply is in (Redisson's unlock latch).
func UnlockLatch(name, request string) string {
	return Prefixed(UnlockLatchPrefix, name) + ":" + request
}

// CheckName returns why Redis or a cluster cannot serve name as one lock,
// or nil: empty, longer than MaxNameLen, or such that the companion-key
// rule would put a companion key in another hash slot ("a}b", "x{}").
// The library wraps the reason in its ErrInvalidName.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("%d bytes, more than %d", len(name), MaxNameLen)
	}
	s := Slot(name)
	if Slot(Prefixed("p", name)) != s || Slot(Suffixed(name, "s")) != s {
		return fmt.Errorf("%q: its companion keys would fall in another cluster slot; use balanced braces with a non-empty {tag}", name)
	}
	return nil
}

// Slot is the Redis Cluster hash slot of key: CRC16 of its hash tag (the
// bytes between the first "{" and the next "}", if not empty) or of the
// whole key, modulo 16384.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
