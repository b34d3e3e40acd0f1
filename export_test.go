package dlock

// RedisAddr lets the external examples find the test server.
func RedisAddr() string { return redisAddr }
