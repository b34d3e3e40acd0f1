module github.com/dlock-go/dlock/bench

go 1.26.0

require (
	github.com/bsm/redislock v0.9.4
	github.com/dlock-go/dlock v0.1.0
	github.com/dlock-go/dlock/dlockrueidis v0.1.0
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/rueidis v1.0.79
	golang.org/x/image v0.47.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)
