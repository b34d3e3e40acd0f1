// Command dlock runs a command while holding a distributed lock on Redis,
// inspects and force-unlocks locks, and shows a live demo. Its locks are
// dlock's, which use Redisson's data layout: locks taken by Java services
// through Redisson show up, and exclude, too.
//
// Run "dlock help" for usage and exit codes.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
