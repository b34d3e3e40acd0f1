package redistest_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := redistest.CheckGoroutines(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
