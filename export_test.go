package dlock

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// RedisAddr lets the external examples find the test server.
func RedisAddr() string { return redisAddr }

// WatchdogLen lets the contract suite (contract_test.go, an external test
// since internal/contract imports dlock) count the locks c's watchdog
// renews.
func WatchdogLen(c *Client) int { return c.watchdog.Len() }

// SharedSentinel and SharedCluster let the contract suite use the
// package's shared Sentinel and cluster setups.
func SharedSentinel(t testing.TB) *redistest.Sentinel { return sharedSentinel(t) }

func SharedCluster(t testing.TB) *redistest.Cluster { return sharedCluster(t) }

// SetAsideTimeout shortens the bound of an attempt handed aside for a
// test, and returns a function that restores it.
func SetAsideTimeout(d time.Duration) (restore func()) {
	old := asideTimeout
	asideTimeout = d
	return func() { asideTimeout = old }
}

// SetAsidePatience shortens how long a Lock goes on trying while its
// attempts handed aside run out of their bound, for a test, and returns a
// function that restores it.
func SetAsidePatience(d time.Duration) (restore func()) {
	old := asidePatience
	asidePatience = d
	return func() { asidePatience = old }
}
