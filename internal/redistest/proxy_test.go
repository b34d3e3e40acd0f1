package redistest_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestProxyLatency(t *testing.T) {
	ctx := context.Background()
	p := redistest.NewTestProxy(t, redistest.NewServer(t).Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	const latency = 50 * time.Millisecond
	p.SetLatency(latency)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// One delay for the request, one for the reply.
	if took := time.Since(start); took < 2*latency {
		t.Fatalf("PING took %v with latency %v, want at least %v", took, latency, 2*latency)
	}

	p.SetLatency(0)
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= latency {
		t.Fatalf("PING took %v after SetLatency(0)", took)
	}
}

func TestProxyDropNextReply(t *testing.T) {
	ctx := context.Background()
	s := redistest.NewServer(t)
	p := redistest.NewTestProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	// Connect first, so that the dropped reply is INCR's and not that of
	// the connection handshake.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	p.DropNextReply()
	n, err := c.Incr(ctx, "counter").Result()
	t.Logf("INCR through a lost reply = %d, %v", n, err)
	if err == nil && n != 2 {
		t.Fatalf("INCR = %d, want 2 (executed, reply lost, retried)", n)
	}
	if got, err := s.Do(ctx, "GET", "counter"); err != nil || got != "2" {
		t.Fatalf("counter on the server = %v, %v; want 2", got, err)
	}
	if p.Drops() != 1 {
		t.Fatalf("Drops() = %d, want 1", p.Drops())
	}
}

func TestProxyCloseAll(t *testing.T) {
	ctx := context.Background()
	p := redistest.NewTestProxy(t, redistest.NewServer(t).Addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING through proxy = %q, %v", buf, err)
	}

	p.CloseAll()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(buf); err != io.EOF {
		t.Fatalf("read after CloseAll: %v, want EOF", err)
	}

	// New connections still work.
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after CloseAll: %v", err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("proxy accepts connections after Close")
	}
}
