// Command verify runs dlock's Jepsen-style matrix (package verify): each
// scenario in network namespaces of its own, with real partitions, pauses
// and kills, and prints one table. It needs root, iproute2 and Redis;
// `make verify` installs them and runs it.
//
//	go run ./cmd/verify                 # the whole matrix, about 30 minutes
//	go run ./cmd/verify -smoke          # the short one, about 3 minutes
//	go run ./cmd/verify -only sentinel  # the scenarios whose name has "sentinel"
//
// It fails when a negative control (a deliberately broken client) was not
// caught or a run could not be carried out; what the checkers find in
// dlock's own runs is reported, not failed on.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dlock-go/dlock/verify"
)

func main() {
	verify.WorkerMain() // this executable is also the worker
	smoke := flag.Bool("smoke", false, "run the short matrix")
	only := flag.String("only", "", "run only the scenarios whose name contains this")
	keep := flag.Bool("keep", false, "keep the histories and logs (their directory is printed)")
	flag.Parse()
	if err := run(*smoke, *only, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "verify:", err)
		os.Exit(1)
	}
}

func run(smoke bool, only string, keep bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	scenarios := verify.Matrix()
	if smoke {
		scenarios = verify.Smoke()
	}
	var chosen []verify.Scenario
	for _, sc := range scenarios {
		if strings.Contains(sc.Name(), only) {
			chosen = append(chosen, sc)
		}
	}
	dir, err := os.MkdirTemp("", "dlock-verify-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("histories and logs in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	results := verify.RunAll(ctx, chosen, dir, func(r verify.Result) {
		fmt.Print(verify.Table([]verify.Result{r}))
	})
	fmt.Println()
	fmt.Print(verify.Table(results))
	var bad []string
	for _, r := range results {
		if r.Err != "" {
			bad = append(bad, r.Name()+": "+r.Err)
		} else if !r.ControlCaught() {
			bad = append(bad, r.Name()+": the negative control was not caught")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d runs:\n%s", len(bad), len(results), strings.Join(bad, "\n"))
	}
	return nil
}
