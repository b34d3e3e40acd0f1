package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewRejectsBadInput(t *testing.T) {
	rdb := newRedis(t)
	if _, err := New(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
	for _, o := range []Option{
		WithWatchdogTimeout(0), WithWatchdogTimeout(-time.Second), WithWatchdogTimeout(time.Millisecond),
		WithWatchdogTimeout(1000 * 24 * time.Hour),
		WithRenewalBatchSize(0), WithRenewalBatchSize(-1),
		WithLogger(nil),
	} {
		if _, err := New(rdb, o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New with a bad option: %v, want ErrInvalidOption", err)
		}
	}
}

func TestNewMutexRejectsBadInput(t *testing.T) {
	c := newClient(t, nil)
	for _, name := range []string{"", strings.Repeat("x", maxNameLen+1), "a}b", "x{}", "{}y{z}"} {
		if _, err := c.NewMutex(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewMutex(%q): %v, want ErrInvalidName", name, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, MaxLease + time.Second} {
		if _, err := c.NewMutex("ok", WithLease(d)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("WithLease(%v): %v, want ErrInvalidOption", d, err)
		}
	}
	var nilClient *Client
	if _, err := nilClient.NewMutex("ok"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil Client: %v", err)
	}
	for _, name := range []string{"plain", "with space", "new\nline", "\xff\xfe", "order:{42}:pay", "{a}"} {
		if _, err := c.NewMutex(name); err != nil {
			t.Errorf("NewMutex(%q): %v", name, err)
		}
	}
}

// TestCompanionKeysShareSlot checks Redisson's naming rule: every key a
// lock uses sits in the lock's cluster slot, with or without a {tag}.
func TestCompanionKeysShareSlot(t *testing.T) {
	for _, name := range []string{"plain", "order:{42}:pay", "{a}", "a{b}c"} {
		k := newMutexKind(nil, name)
		keys := []string{
			k.channel(""), k.token(),
			releaseLatch(name, "id"),
			suffixName(name, "rwlock_timeout"),
		}
		for _, key := range keys {
			if slot(key) != slot(name) {
				t.Errorf("%q: key %q in slot %d, lock in slot %d", name, key, slot(key), slot(name))
			}
		}
	}
	if got := prefixName(channelPrefix, "order:{42}:pay"); got != "redisson_lock__channel:order:{42}:pay" {
		t.Errorf("channel = %q", got)
	}
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	for key, want := range map[string]uint16{"foo": 12182, "a{b}c": 3300, "x}y": 8210, "foo{}": 5542} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"", "a", "a{b}c", "x}y", "foo{}", "{", "}{", "{{a}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if validateName(name) != nil {
			return
		}
		s := slot(name)
		for _, key := range []string{prefixName(channelPrefix, name), prefixName(tokenPrefix, name), suffixName(name, "x:1")} {
			if slot(key) != s {
				t.Fatalf("accepted %q but %q is in slot %d, not %d", name, key, slot(key), s)
			}
		}
	})
}
