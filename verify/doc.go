// Package verify is dlock's Jepsen-style harness: it runs Redis (a single
// server, or a master with replicas and three sentinels) and worker
// processes that contend for a dlock lock, each in its own Linux network
// namespace, injects real faults (partitions, pauses past the lease, kill
// -9 of the master), and checks the recorded histories with porcupine
// models (mutex, counting semaphore, read-write lock), a lost-update
// counter and a fenced register. Every checker has a negative control, a
// deliberately broken client, that it must catch.
//
// It needs root (ip netns), iproute2 and redis-server/redis-sentinel on
// PATH. `make verify` runs the matrix (cmd/verify) and prints one table;
// `go test` runs a short smoke of it. docs/analysis.md publishes the result.
//
// It is a module of its own so that porcupine costs dlock's users nothing.
package verify
