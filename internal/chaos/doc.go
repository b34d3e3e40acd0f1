// Package chaos holds dlock's fault-injection tests: worker processes
// contend for one lock while the test kills their pub/sub connections,
// restarts Redis, flushes the script cache, adds network latency, freezes
// a holder, or fails over a Sentinel or cluster master (reporting the
// double grants seen with and without replica sync), and the recorded
// history is checked for mutual exclusion (see internal/history). `make test` runs short versions; `make soak` (env
// DLOCK_SOAK=1) runs long ones and prints a summary table.
package chaos
