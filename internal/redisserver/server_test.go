package redisserver

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestStartUnixSocket(t *testing.T) {
	s, err := Start(t.Context(), Config{Unix: true, TempPrefix: "redisserver-test-"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Network() != "unix" || s.Port() != 0 || !strings.HasSuffix(s.Addr(), "/redis.sock") {
		t.Fatalf("Network %q, Addr %q, Port %d", s.Network(), s.Addr(), s.Port())
	}
	rdb := s.Client()
	defer rdb.Close()
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Addr()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Close: %v", err)
	}
}

func TestStartTCP(t *testing.T) {
	s, err := Start(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Network() != "tcp" || !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 0 {
		t.Fatalf("Network %q, Addr %q, Port %d", s.Network(), s.Addr(), s.Port())
	}
	if got, err := s.Do(t.Context(), "CONFIG", "GET", "save"); err != nil || got.(map[any]any)["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want persistence off", got, err)
	}
}

func TestStartMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := Start(t.Context(), Config{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}
