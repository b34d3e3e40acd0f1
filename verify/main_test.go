package verify

import (
	"os"
	"testing"
)

// TestMain runs the worker when the harness started this test binary as
// one (WorkerMain), the tests otherwise.
func TestMain(m *testing.M) {
	WorkerMain()
	os.Exit(m.Run())
}
