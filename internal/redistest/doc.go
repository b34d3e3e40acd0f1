// Package redistest starts real Redis processes for tests: single servers,
// groups of independent servers (for RedLock), a 3-master/3-replica cluster,
// a master/replica pair watched by three sentinels, and a fault-injecting TCP
// proxy. Nothing is mocked: every node is a redis-server (or redis-sentinel)
// child process bound to a free 127.0.0.1 port with its own temporary
// directory, and Close removes both. The processes themselves are started
// by internal/redisserver, which cmd/dlock and bench share.
//
// Every constructor comes in two flavours. The Start* functions return an
// error and suit TestMain, where no testing.TB exists; the caller must Close
// what they return. The New* functions take a testing.TB, fail the test on
// error and register Close with tb.Cleanup.
//
// The package needs redis-server, redis-sentinel and redis-cli on PATH and
// runs on Unix only (Pause and Resume use SIGSTOP and SIGCONT). On Linux
// the children get SIGKILL when the test binary dies (Pdeathsig), so
// a crashed or killed test run does not leave servers behind.
//
// CheckGoroutines is meant for TestMain: it reports goroutines of this module
// or of go-redis that are still running after the tests finished.
package redistest
