package verify

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
)

// respConn is a bare RESP connection for the partition test: go-redis
// would retry and reconnect, hiding whether one connection was cut.
type respConn struct {
	net.Conn
	r *bufio.Reader
}

func dialResp(ctx context.Context, from *Node, addr string) (*respConn, error) {
	c, err := from.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respConn{c, bufio.NewReader(c)}, nil
}

func (c *respConn) ping(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}
