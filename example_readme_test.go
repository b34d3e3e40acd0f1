package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Example_readme runs the first program of README.md against the test
// server; TestReadmeProgram checks that README.md has chargeAccount as
// written here and that its program builds.
func Example_readme() {
	if err := chargeAccount(context.Background(), redisAddr()); err != nil {
		log.Fatal(err)
	}
	// Output: charging account 42
}

func chargeAccount(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // or a Cluster or Sentinel client
	defer rdb.Close()
	locks, err := dlock.New(rdb) // one dlock Client per process
	if err != nil {
		return err
	}
	defer locks.Close()

	m, err := locks.NewMutex("billing:account:42")
	if err != nil {
		return err // an invalid name or option
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second) // bounds the wait, not the work
	defer cancel()
	lockCtx, err := m.Lock(waitCtx)
	if errors.Is(err, dlock.ErrNotObtained) {
		return fmt.Errorf("account 42 is busy, try later: %w", err)
	}
	if err != nil {
		return err // Redis unreachable, permission denied, ...
	}
	// The watchdog renews the lease while the lock is held. lockCtx is
	// cancelled, with context.Cause(lockCtx) wrapping dlock.ErrLockLost, if
	// the lock is lost anyway: do the work under lockCtx.
	fmt.Println("charging account 42")
	return m.Unlock(lockCtx)
}

// readmeProgram returns the first ```go block of README.md that is a
// whole program.
func readmeProgram(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if bytes.HasPrefix([]byte(m[1]), []byte("package main\n")) {
			return m[1]
		}
	}
	t.Fatal("README.md has no ```go block starting with package main")
	return ""
}

// funcText returns the source of function name in f, as gofmt prints it.
func funcText(t *testing.T, fset *token.FileSet, f *ast.File, name string) string {
	t.Helper()
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name {
			var buf bytes.Buffer
			if err := printer.Fprint(&buf, fset, &printer.CommentedNode{Node: fd, Comments: f.Comments}); err != nil {
				t.Fatal(err)
			}
			return buf.String()
		}
	}
	t.Fatalf("no function %s", name)
	return ""
}

func imports(f *ast.File) []string {
	var paths []string
	for _, s := range f.Imports {
		p, _ := strconv.Unquote(s.Path.Value)
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// TestReadmeProgram checks that README.md's program has chargeAccount as
// Example_readme runs it, imports only what this file's example code
// uses, and builds as written (the build is skipped with -short).
func TestReadmeProgram(t *testing.T) {
	src := readmeProgram(t)
	fset := token.NewFileSet()
	readme, err := parser.ParseFile(fset, "README.md", src, parser.ParseComments)
	if err != nil {
		t.Fatalf("README program does not parse: %v", err)
	}
	self, err := parser.ParseFile(fset, "example_readme_test.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := funcText(t, fset, readme, "chargeAccount"), funcText(t, fset, self, "chargeAccount"); got != want {
		t.Errorf("README.md's chargeAccount differs from example_readme_test.go's:\n--- README\n%s\n--- example\n%s", got, want)
	}
	want := []string{"context", "errors", "fmt", "github.com/dlock-go/dlock", "github.com/redis/go-redis/v9", "log", "time"}
	if got := imports(readme); !slices.Equal(got, want) {
		t.Errorf("README program imports %q, want %q", got, want)
	}

	if testing.Short() {
		return
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module readme\n\ngo 1.26.0\n\nrequire github.com/dlock-go/dlock v0.0.0\n\nreplace github.com/dlock-go/dlock => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-mod=mod", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("README program does not build: %v\n%s", err, out)
	}
}

// TestReadmeQuickStart: the contributors' quick start keeps the commands
// CI and newcomers run, make demo and make test, in a sh block, and the
// install commands are there for users.
func TestReadmeQuickStart(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var sh strings.Builder
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllSubmatch(b, -1) {
		sh.Write(m[1])
	}
	for _, want := range []string{
		"\nmake demo ", "\nmake test ",
		"go get github.com/dlock-go/dlock ", "go install github.com/dlock-go/dlock/cmd/dlock@latest ",
	} {
		if !strings.Contains("\n"+sh.String(), want) {
			t.Errorf("README.md has no %q in a ```sh block", strings.TrimSpace(want))
		}
	}
}
