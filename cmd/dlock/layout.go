package main

import (
	"regexp"
	"strconv"
	"strings"
)

// Redisson's data layout, which dlock shares: what status, list and
// unlock read. A lock named N is a hash N whose fields are owners
// ("<uuid>:<threadId>", dlock's "<clientID>:<n>") mapped to hold counts;
// a read-write lock adds a "mode" field ("read" or "write") and names
// write holds "<owner>:write".
const (
	modeField     = "mode"
	writeSuffix   = ":write"
	tokenPrefix   = "redisson_lock_token"
	queuePrefix   = "redisson_lock_queue"
	timeoutPrefix = "redisson_lock_timeout"
	rwTimeoutPart = "rwlock_timeout"
)

// A dlock Client's holder record, which the library writes at its first
// lock attempt and deletes at Close (clientinfo.go there): the hash
// "dlock:client:<clientID>" with these fields, all strings. Lock keys do
// not point to it; an owner's client id (the part before the last colon)
// names it.
const (
	clientRecordPrefix = "dlock:client:"
	recordHost         = "host"
	recordPID          = "pid"
	recordProgram      = "program"
	recordName         = "name"    // WithClientName; dlock run and hold: their command
	recordStarted      = "started" // RFC 3339, when the Client was created
)

// ownerField matches an owner field: a UUID, a thread or owner number, and
// for a write hold ":write".
var ownerField = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}:[0-9]+(:write)?$`)

// prefixName is Redisson's rule for a companion key in front of the lock
// name, "p:{N}", or "p:N" when N already has a hash tag; the library's
// names.go applies the same rule when it writes.
func prefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// suffixName is Redisson's rule for a companion key after the lock name,
// "{N}:s", or "N:s" when N already has a hash tag.
func suffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// readTimeoutKey is the key whose TTL is the lease of read hold k of owner
// on read-write lock name: "{N}:<owner>:rwlock_timeout:<k>".
func readTimeoutKey(name, owner string, k int) string {
	return suffixName(name, owner+":"+rwTimeoutPart) + ":" + strconv.Itoa(k)
}
