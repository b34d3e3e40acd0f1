package dlock

// RedisAddr lets the external examples find the test server.
func RedisAddr() string { return redisAddr }

// WatchdogLen lets the contract suite (contract_test.go, an external test
// since internal/contract imports dlock) count the locks c's watchdog
// renews.
func WatchdogLen(c *Client) int { return c.watchdog.Len() }
