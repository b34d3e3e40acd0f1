package dlockotel_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// redisAddr is the redis-server that TestMain starts for the tests and
// examples.
var redisAddr string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	redisAddr = srv.Addr()
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "closing redis-server:", err)
	}
	return code
}
