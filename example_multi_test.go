package dlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// independentServers starts n redis-servers for the RedLock examples and
// returns their addresses and a function that stops them.
func independentServers(n int) ([]string, func()) {
	servers, err := redistest.StartServers(n)
	if err != nil {
		panic(err)
	}
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs, func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
}

// redLockClients returns one dlock Client per address, and a function
// that closes them.
func redLockClients(addrs []string) ([]*dlock.Client, func()) {
	var clients []*dlock.Client
	var closers []func() error
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		c, err := dlock.New(rdb)
		if err != nil {
			panic(err)
		}
		clients = append(clients, c)
		closers = append(closers, c.Close, rdb.Close)
	}
	return clients, func() {
		for _, f := range closers {
			_ = f()
		}
	}
}

func ExampleMultiLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()
	from, err := locks.NewMutex("example:account:1")
	if err != nil {
		fmt.Println(err)
		return
	}
	to, err := locks.NewMutex("example:account:2")
	if err != nil {
		fmt.Println(err)
		return
	}

	// A transfer holds both accounts. Members are locked in name order,
	// whatever the order given, so transfers in opposite directions cannot
	// deadlock.
	both, err := dlock.NewMultiLock(to, from)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(both.Name())
	lockCtx, err := both.Lock(ctx)
	if err != nil {
		panic(err)
	}
	_, err = from.TryLock(ctx) // another owner
	fmt.Println("account 1 taken:", errors.Is(err, dlock.ErrNotObtained))
	_ = both.Unlock(lockCtx)
	// Output:
	// example:account:1,example:account:2
	// account 1 taken: true
}

func ExampleMultiLock_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()
	a, err := locks.NewMutex("example:multi:a")
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := locks.NewMutex("example:multi:b")
	if err != nil {
		fmt.Println(err)
		return
	}
	held, _ := b.Lock(ctx) // someone else holds b

	both, err := dlock.NewMultiLock(a, b)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = both.TryLock(ctx)
	fmt.Println("not obtained:", errors.Is(err, dlock.ErrNotObtained))
	locked, _ := a.IsLocked(ctx)
	fmt.Println("a kept:", locked) // all or nothing
	_ = b.Unlock(held)
	// Output:
	// not obtained: true
	// a kept: false
}

func ExampleRedLock() {
	ctx := context.Background()
	addrs, stop := independentServers(3)
	defer stop()
	nodes, closeNodes := redLockClients(addrs) // one Client per server
	defer closeNodes()

	l, err := dlock.NewRedLock(nodes, "example:redlock", dlock.WithFencing())
	if err != nil {
		panic(err)
	}
	lockCtx, err := l.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Pass the token to the resource: it rejects tokens lower than the
	// highest it has seen, which keeps a paused former holder out.
	token, ok := dlock.Token(lockCtx)
	fmt.Println("fenced:", ok && token > 0)
	if err := l.Unlock(lockCtx); err != nil {
		panic(err)
	}
	// Output: fenced: true
}

func ExampleQuorumError() {
	ctx := context.Background()
	addrs, stop := independentServers(1)
	defer stop()
	// One live server and two addresses where nothing listens: 1 of 3
	// nodes cannot make a quorum.
	nodes, closeNodes := redLockClients(append(addrs, "127.0.0.1:1", "127.0.0.1:2"))
	defer closeNodes()

	l, err := dlock.NewRedLock(nodes, "example:quorum")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = l.TryLock(ctx)
	var qe *dlock.QuorumError
	if errors.As(err, &qe) {
		// Not ErrNotObtained: no node said the lock is taken, the nodes
		// failed. A node holding it for another owner would make it so.
		fmt.Println(errors.Is(err, dlock.ErrNotObtained), qe.Op, len(qe.Failed), "of", qe.Nodes, "nodes failed, quorum", qe.Quorum)
		for _, n := range qe.Failed {
			fmt.Println("failed:", n.Addr)
		}
	}
	// Output:
	// false lock 2 of 3 nodes failed, quorum 2
	// failed: 127.0.0.1:1
	// failed: 127.0.0.1:2
}

func ExampleNodeError() {
	err := fmt.Errorf("wrapped: %w", &dlock.QuorumError{Op: "lock", Quorum: 2, Nodes: 3, Failed: []*dlock.NodeError{
		{Addr: "10.0.0.1:6379", Err: context.DeadlineExceeded},
		{Addr: "10.0.0.2:6379", Err: dlock.ErrNotObtained},
	}})
	var ne *dlock.NodeError
	fmt.Println(errors.As(err, &ne), ne.Addr)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true 10.0.0.1:6379
	// true
}
