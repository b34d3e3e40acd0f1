package redisserver

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// errAddrInUse reports that a process could not bind its port because
// another process took it between FreePort and the bind.
var errAddrInUse = errors.New("address already in use")

var (
	portsMu sync.Mutex
	// portsGiven holds every port FreePort handed out in this process, so
	// that servers started in parallel never race for the same port.
	portsGiven = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It asks
// the kernel for one by listening on port 0, never returns the default Redis
// ports and never returns the same port twice in one process.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redisserver: find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("redisserver: find a free port: %w", err)
		}
		if port == 6379 || port == 26379 || portsGiven[port] {
			continue
		}
		portsGiven[port] = true
		return port, nil
	}
	return 0, errors.New("redisserver: no free port found")
}
