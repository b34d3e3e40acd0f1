package dlock

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestModulesUsableOnceTagged: dlockotel's go.mod (and dlocktest's) must work as a
// dependency once the release is tagged. Go ignores a dependency's
// replace directives, so it must have none, and must require dlock at the
// version the release tags (vX.Y.Z, not a placeholder pseudo-version). A
// scratch module stands in for a user: it requires dlockotel and dlock at
// that version, with a versioned replace (the "local tag") pointing at
// this checkout, and must build with GOWORK=off and no network.
func TestModulesUsableOnceTagged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// The published modules beside dlock: the same rules for each
	// (dlocktest's scratch-module build is its own TestUserModule).
	var version string
	for _, mod := range []string{"dlockotel", "dlocktest"} {
		gomod, err := os.ReadFile(filepath.Join(root, mod, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^\s*replace\b`).Match(gomod) {
			t.Errorf("%s/go.mod has a replace directive, which Go ignores in a dependency:\n%s", mod, gomod)
		}
		m := regexp.MustCompile(`(?m)^\s*github\.com/dlock-go/dlock (\S+)`).FindSubmatch(gomod)
		if m == nil {
			t.Fatalf("%s/go.mod does not require github.com/dlock-go/dlock", mod)
		}
		v := string(m[1])
		if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(v) {
			t.Fatalf("%s/go.mod requires dlock %s, not a version a release tags (vX.Y.Z)", mod, v)
		}
		if version != "" && v != version {
			t.Errorf("%s/go.mod requires dlock %s, dlockotel/go.mod %s: the modules are tagged together", mod, v, version)
		}
		version = v
	}

	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", `module example.com/scratch

go 1.26.0

require (
	github.com/dlock-go/dlock `+version+`
	github.com/dlock-go/dlock/dlockotel `+version+`
)

replace github.com/dlock-go/dlock `+version+` => `+root+`

replace github.com/dlock-go/dlock/dlockotel `+version+` => `+filepath.Join(root, "dlockotel")+`
`)
	var sums strings.Builder
	for _, f := range []string{"go.sum", "dlockotel/go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		sums.Write(b)
	}
	write("go.sum", sums.String())
	write("main.go", `package main

import (
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/redis/go-redis/v9"
)

func main() {
	inst, err := dlockotel.New()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{})
	defer rdb.Close()
	if _, err := dlock.New(rdb, dlock.WithObserver(inst.Observer())); err != nil {
		panic(err)
	}
}
`)
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	// Only the module cache: the build must need nothing this checkout
	// and its go.sum files do not name.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a scratch module on dlock %s: %v\n%s", version, err, out)
	}
}
