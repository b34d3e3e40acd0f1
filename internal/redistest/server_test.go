package redistest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestServerRestartKeepsPort(t *testing.T) {
	ctx := context.Background()
	s := redistest.NewServer(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 0 || s.Port() == 6379 {
		t.Fatalf("Addr() = %q, Port() = %d", s.Addr(), s.Port())
	}
	c := s.Client()
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	addr := s.Addr()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	// The pooled connection died with the old process; go-redis retries on
	// a new one.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: %v, want redis.Nil (empty data)", err)
	}
}

func TestServerKillPauseResume(t *testing.T) {
	ctx := context.Background()
	s := redistest.NewServer(t)
	ping := func() error {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := s.Do(ctx, "PING")
		return err
	}

	s.Pause()
	if err := ping(); err == nil {
		t.Fatal("PING answered while paused")
	}
	s.Resume()
	if err := ping(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	s.Kill()
	if err := ping(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Fatalf("PING after Kill and Restart: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

func TestServerExtraArgs(t *testing.T) {
	s := redistest.NewServer(t, "--maxmemory", "10mb")
	got, err := s.Do(context.Background(), "CONFIG", "GET", "maxmemory")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := got.(map[any]any); m["maxmemory"] != "10485760" {
		t.Fatalf("CONFIG GET maxmemory = %v", got)
	}
}

func TestServerStartErrors(t *testing.T) {
	_, err := redistest.StartServer("--no-such-directive", "x")
	if err == nil || !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("bad directive: got %v, want an error quoting the server log", err)
	}

	t.Setenv("PATH", t.TempDir())
	_, err = redistest.StartServer()
	if err == nil || !strings.Contains(err.Error(), "redis-server not found on PATH") {
		t.Fatalf("no redis-server: got %v", err)
	}
}

func TestStartServersAreIndependent(t *testing.T) {
	ctx := context.Background()
	servers := redistest.NewServers(t, 3)
	ports := map[int]bool{}
	for i, s := range servers {
		ports[s.Port()] = true
		if _, err := s.Do(ctx, "SET", "k", i); err != nil {
			t.Fatal(err)
		}
	}
	if len(ports) != 3 {
		t.Fatalf("servers share ports: %v", ports)
	}
	for i, s := range servers {
		got, err := s.Do(ctx, "GET", "k")
		if err != nil || got != string(rune('0'+i)) {
			t.Fatalf("server %d: GET k = %v, %v; want %d", i, got, err, i)
		}
	}
}
