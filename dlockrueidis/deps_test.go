package dlockrueidis_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGoRedisBuildHasNoRueidis: a go-redis user's build (the root package
// and cmd/dlock) compiles no rueidis package; rueidis comes only with this
// module.
func TestGoRedisBuildHasNoRueidis(t *testing.T) {
	for _, pkg := range []string{"github.com/dlock-go/dlock", "github.com/dlock-go/dlock/cmd/dlock"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		if !strings.Contains(string(out), "github.com/redis/go-redis/v9\n") {
			t.Fatalf("go list -deps %s lists no go-redis: the check reads the wrong output\n%s", pkg, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, "rueidis") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
