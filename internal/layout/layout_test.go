package layout

import (
	"strings"
	"testing"
)

func TestCompanionKeys(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Prefixed(LockChannelPrefix, "a"), "redisson_lock__channel:{a}"},
		{Prefixed(TokenPrefix, "order:{42}:pay"), "redisson_lock_token:order:{42}:pay"},
		{Suffixed("a", "timeout"), "{a}:timeout"},
		{Suffixed("{t}x", "timeout"), "{t}x:timeout"},
		{ReadHoldKey("rw", "u:1", 2), "{rw}:u:1:rwlock_timeout:2"},
		{WriteField("u:1"), "u:1:write"},
		{UnlockLatch("a", "r"), "redisson_unlock_latch:{a}:r"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestPrefixedPair(t *testing.T) {
	for _, name := range []string{"a", "order:{42}:pay"} {
		c, tok := PrefixedPair(LockChannelPrefix, TokenPrefix, name)
		if c != Prefixed(LockChannelPrefix, name) || tok != Prefixed(TokenPrefix, name) {
			t.Errorf("PrefixedPair(%q) = %q, %q; want Prefixed's", name, c, tok)
		}
	}
}

func TestSlot(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	for key, want := range map[string]uint16{"foo": 12182, "a{b}c": 3300, "x}y": 8210, "foo{}": 5542} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("x", MaxNameLen+1), "a}b", "x{}", "{}y{z}"} {
		if CheckName(name) == nil {
			t.Errorf("CheckName(%q) = nil", name)
		}
	}
	for _, name := range []string{"plain", "with space", "order:{42}:pay", "{a}", strings.Repeat("x", MaxNameLen)} {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v", name, err)
		}
	}
}
