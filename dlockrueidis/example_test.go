package dlockrueidis_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/redis/rueidis"
)

// A dlock Client on the rueidis client the application already has: the
// same locks as on go-redis, on the same Redis data.
func Example() {
	ctx := context.Background()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()

	c, err := dlockrueidis.New(rc)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	m, err := c.NewMutex("example:rueidis")
	if err != nil {
		log.Fatal(err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held")
	if err := m.Unlock(lockCtx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// held
	// released
}

// A fenced write on rueidis: the lock's fence travels with the write, and
// the data is set only while no later holder has written.
func ExampleScripter() {
	ctx := context.Background()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	c, err := dlockrueidis.New(rc)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	m, err := c.NewMutex("example:rueidis:report", dlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Unlock(lockCtx)
	err = dlock.FencedSet(ctx, dlockrueidis.Scripter(rc), dlock.FenceOf(lockCtx), "example:rueidis:report:data", "v1", 0)
	fmt.Println("written:", err == nil)
	// Output:
	// written: true
}
