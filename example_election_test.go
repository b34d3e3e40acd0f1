package dlock_test

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Only one process runs the scheduler: each one campaigns, and the one
// elected runs until its leader context ends (it resigned, or lost the
// leadership: a paused process whose lease ran out learns it there).
func ExampleElection_Campaign() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	election, err := locks.NewElection("example:scheduler")
	if err != nil {
		panic(err)
	}

	leaderCtx, err := election.Campaign(ctx, "http://10.0.0.7:8080") // waits until elected
	if err != nil {
		panic(err)
	}
	// ... run the scheduler with leaderCtx: it is cancelled when the
	// leadership is lost ...
	if err := election.Proclaim(leaderCtx, "http://10.0.0.7:9090"); err != nil {
		panic(err)
	}
	leader, _ := election.Leader(ctx)
	fmt.Println("leader:", leader.Value, "revision", leader.Seq)

	if err := election.Resign(leaderCtx); err != nil {
		panic(err)
	}
	fmt.Println("leader context ended:", leaderCtx.Err() != nil)
	_, err = election.Leader(ctx)
	fmt.Println(err)
	// Output:
	// leader: http://10.0.0.7:9090 revision 1
	// leader context ended: true
	// dlock: no leader: "example:scheduler"
}

// Followers watch the leader: every change is pushed to them in order,
// with "no leader" (an empty Owner) when a leadership ends.
func ExampleElection_Observe() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	election, err := locks.NewElection("example:primary")
	if err != nil {
		panic(err)
	}

	changes := election.Observe(ctx)
	show := func(l dlock.LeaderInfo) {
		if l.Owner == "" {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", l.Value)
	}
	show(<-changes) // the state when observing starts

	leaderCtx, err := election.Campaign(ctx, "db-1")
	if err != nil {
		panic(err)
	}
	_ = election.Proclaim(leaderCtx, "db-1 (read-only)")
	_ = election.Resign(leaderCtx)
	for range 3 {
		show(<-changes)
	}
	// Output:
	// no leader
	// leader: db-1
	// leader: db-1 (read-only)
	// no leader
}
