package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// newLocks is the code under test's own constructor: a dlock Client on the
// Redis at addr, as the application makes it in production.
func newLocks(addr string, opts ...dlock.Option) (*dlock.Client, func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); _ = rdb.Close() }, nil
}

// In a test, dlocktest.New(t) is all it takes: a Client on a server of the
// test's own, closed when the test ends. Outside a test (TestMain, this
// Example) Start gives the server, and the code under test connects to its
// address. Here two Clients, as two processes, take turns on one lock: the
// second waits, and the first's Unlock wakes it.
func Example() {
	srv, err := dlocktest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	a, closeA, err := newLocks(srv.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer closeA()
	b, closeB, err := newLocks(srv.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer closeB()
	ma, err := a.NewMutex("billing:account:42")
	if err != nil {
		log.Fatal(err)
	}
	mb, err := b.NewMutex("billing:account:42")
	if err != nil {
		log.Fatal(err)
	}
	held, err := ma.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = mb.TryLock(ctx)
	fmt.Println("b, while a holds it:", errors.Is(err, dlock.ErrNotObtained))
	got := make(chan error, 1)
	go func() {
		lockCtx, err := mb.Lock(ctx) // waits for a's Unlock
		if err == nil {
			err = mb.Unlock(lockCtx)
		}
		got <- err
	}()
	if err := ma.Unlock(held); err != nil {
		log.Fatal(err)
	}
	fmt.Println("b, after a's Unlock:", <-got)
	// Output:
	// b, while a holds it: true
	// b, after a's Unlock: <nil>
}

// Testing a lost lock: FastForward runs the holder's lease out on the
// server, and the holder's lock context ends, with the cause
// dlock.ErrLockLost, at its watchdog's next renewal: a third of
// WithWatchdogTimeout, short here so that the test is quick.
func ExampleServer_FastForward() {
	srv, err := dlocktest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, closeC, err := newLocks(srv.Addr(), dlock.WithWatchdogTimeout(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer closeC()
	m, err := c.NewMutex("nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	lockCtx, err := m.Lock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	srv.FastForward(time.Minute) // the lease (300 ms) runs out on the server
	select {
	case <-lockCtx.Done():
		fmt.Println("lost:", errors.Is(context.Cause(lockCtx), dlock.ErrLockLost))
	case <-time.After(5 * time.Second):
		fmt.Println("the holder was never told")
	}
	fmt.Println("Unlock:", errors.Is(m.Unlock(lockCtx), dlock.ErrNotHeld))
	// Output:
	// lost: true
	// Unlock: true
}

// Testing an outage: while the server is stopped, calls fail with
// dlock.ErrUnreachable (a Lock waits instead, as long as its ctx
// allows); after Restart the Client reconnects by itself.
func ExampleServer_Stop() {
	srv, err := dlocktest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, closeC, err := newLocks(srv.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer closeC()
	m, err := c.NewMutex("orders")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	srv.Stop()
	fmt.Println("Ping while stopped:", errors.Is(c.Ping(ctx), dlock.ErrUnreachable))
	got := make(chan error, 1)
	go func() {
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lockCtx, err := m.Lock(wait) // waits for the server
		if err == nil {
			err = m.Unlock(lockCtx)
		}
		got <- err
	}()
	srv.Restart()
	fmt.Println("Lock across the restart:", <-got)
	// Output:
	// Ping while stopped: true
	// Lock across the restart: <nil>
}
