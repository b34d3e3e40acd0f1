// Package fencetest proves dlock's storage-side fencing against a real
// PostgreSQL: its tests run dlock.CheckToken in transactions on a server
// that StartPostgres starts from Debian's postgresql package, and
// cmd/fencing is the founding articles' three experiments as one demo.
// It is a module of its own so that the PostgreSQL driver (pgx) stays out
// of dlock's go.mod: a dlock user's build never sees it.
package fencetest
