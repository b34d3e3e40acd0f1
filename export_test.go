package dlock

import "time"

// RedisAddr lets the external examples find the test server.
func RedisAddr() string { return redisAddr }

// SetAsideTimeout shortens the bound of an attempt handed aside for a
// test, and returns a function that restores it.
func SetAsideTimeout(d time.Duration) (restore func()) {
	old := asideTimeout
	asideTimeout = d
	return func() { asideTimeout = old }
}
