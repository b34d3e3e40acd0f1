package dlock

import (
	"fmt"
	"strings"
)

// maxNameLen bounds lock names; Redis would take 512 MB.
const maxNameLen = 1024

// Key prefixes shared with Redisson.
const (
	channelPrefix     = "redisson_lock__channel"
	tokenPrefix       = "redisson_lock_token"
	unlockLatchPrefix = "redisson_unlock_latch"
)

// prefixName is Redisson's rule for a companion key in front of the name:
// "p:{name}", or "p:name" when the name already carries a hash tag.
func prefixName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// suffixName is Redisson's rule for a companion key after the name:
// "{name}:s", or "name:s" when the name already carries a hash tag.
func suffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// validateName rejects names that Redis or a cluster cannot serve as one
// lock: empty, too long, or such that Redisson's naming rule would put a
// companion key in another hash slot (names like "a}b" or "x{}").
func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidName)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidName, len(name), maxNameLen)
	}
	s := slot(name)
	if slot(prefixName("p", name)) != s || slot(suffixName(name, "s")) != s {
		return fmt.Errorf("%w: %q: its companion keys would fall in another cluster slot; use balanced braces with a non-empty {tag}", ErrInvalidName, name)
	}
	return nil
}

// slot is the Redis Cluster hash slot of key: CRC16 of its hash tag (the
// bytes between the first "{" and the next "}", if not empty) or of the
// whole key, modulo 16384.
func slot(key string) uint16 {
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

// releaseLatch is the key under which a force release records its outcome
// until its reply is in (Redisson's unlock latch).
func releaseLatch(name, request string) string {
	return prefixName(unlockLatchPrefix, name) + ":" + request
}
