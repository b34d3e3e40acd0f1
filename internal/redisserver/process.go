package redisserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// LookPath finds a Redis executable (redis-server, redis-sentinel,
// redis-cli) and says how to get it if missing (ErrNotFound).
func LookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s %w; install it (Debian: apt-get install redis-server, or `make test`)", name, ErrNotFound)
	}
	return path, nil
}

// processID asks the Redis (or Sentinel) process at addr on network for
// its pid with a raw INFO command. It does not use go-redis, so polling it during startup
// creates no clients and no background goroutines.
func processID(network, addr string) (int, error) {
	conn, err := net.DialTimeout(network, addr, time.Second)
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
	pid, ok := InfoField(string(body), "process_id")
	if !ok {
		return 0, fmt.Errorf("INFO has no process_id")
	}
	return strconv.Atoi(pid)
}

// InfoField returns the value of key in the text of an INFO reply.
func InfoField(info, key string) (string, bool) {
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
