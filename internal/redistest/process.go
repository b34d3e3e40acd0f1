package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// lookPath finds a Redis executable and explains how to get it if missing.
func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found on PATH; run `make test`, which installs Debian's redis-server", name)
	}
	return path, nil
}

// processID asks the Redis (or Sentinel) process at addr for its pid with a
// raw INFO command. It does not use go-redis, so polling it during startup
// creates no clients and no background goroutines.
func processID(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(conn)
	header, err := rd.ReadString('\n')
	if err != nil {
		return 0, err
	}
	header = strings.TrimSpace(header)
	if !strings.HasPrefix(header, "$") {
		return 0, fmt.Errorf("INFO replied %q", header)
	}
	n, err := strconv.Atoi(header[1:])
	if err != nil {
		return 0, fmt.Errorf("INFO replied %q", header)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, err
	}
	pid, ok := infoField(string(body), "process_id")
	if !ok {
		return 0, fmt.Errorf("INFO has no process_id")
	}
	return strconv.Atoi(pid)
}

// infoField returns the value of key in the text of an INFO reply.
func infoField(info, key string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v, true
		}
	}
	return "", false
}

// logTail returns the last lines of the log file at path, for error messages.
func logTail(path string) string {
	const maxLines = 20
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

// waitUntil calls check every 50ms until it returns nil and fails with the
// last error of check when timeout passes or ctx ends. Each call of check
// gets a context that ends at the deadline.
func waitUntil(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w; last check: %v", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
