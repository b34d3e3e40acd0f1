// Package verify is dlock's Jepsen-style harness: it runs Redis (a single
// server, a master with replicas and three sentinels, or a Cluster) and
// worker processes that contend for a dlock lock, each in its own Linux
// network namespace, injects real faults (partitions, pauses past the
// lease, kill -9 of the master), and checks the recorded histories with
// porcupine models (mutex, counting semaphore, read-write lock), a
// lost-update counter and a fenced register. Every checker has a negative
// control, a deliberately broken client, that it must catch.
//
// The fair lock's rows check its hand-over by message: the pause-waiter
// fault freezes the head waiter past the lease of the hand-over it is
// given, and holds back its subscription's messages (tc) until it has
// made its next attempt; the handover-no-seq control, a worker built with
// the tag dlock_broken_handover, takes that late message for a grant and
// must make the history non-linearizable.
//
// It needs root (ip netns), iproute2 (ip, tc with htb) and
// redis-server/redis-sentinel on PATH, and the go command for the broken
// worker. `make verify` runs the matrix (cmd/verify) and prints one table;
// `go test` runs a short smoke of it. docs/analysis.md publishes the result.
//
// It is a module of its own so that porcupine costs dlock's users nothing.
package verify
