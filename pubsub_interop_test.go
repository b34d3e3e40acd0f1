package dlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClusterPubSubFollowsRedissonAuto: without WithShardedPubSub, a
// Client on a cluster picks what Redisson's shardedSubscriptionMode AUTO
// picks there: sharded pub/sub when PUBSUB SHARDNUMSUB is answered, plain
// PUBLISH and SUBSCRIBE when it is refused (an ACL user without +pubsub),
// so that it hears, and is heard by, a Redisson fleet on the same
// cluster. The option overrides the probe.
func TestClusterPubSubFollowsRedissonAuto(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	if c := newClient(t, newClusterRedis(t, cl, time.Second)); c.publish != "spublish" {
		t.Fatalf("default on a Redis 7 cluster: %q, want spublish", c.publish)
	}
	if c := newClient(t, newClusterRedis(t, cl, time.Second), WithShardedPubSub(false)); c.publish != "publish" {
		t.Fatalf("WithShardedPubSub(false): %q, want publish", c.publish)
	}

	user := "dlock-nopubsub-" + strings.ToLower(t.Name())
	for _, n := range cl.Nodes() {
		if _, err := n.Do(ctx, "ACL", "SETUSER", user, "on", ">secret", "~*", "&*", "+@all", "-pubsub"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range cl.Nodes() {
			_, _ = n.Do(ctx, "ACL", "DELUSER", user)
		}
	})
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: user, Password: "secret", DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	if c.publish != "publish" {
		t.Fatalf("ACL user without +pubsub: %q, want publish (Redisson's AUTO fallback)", c.publish)
	}
	if c := newClient(t, rdb, WithShardedPubSub(true)); c.publish != "spublish" {
		t.Fatalf("WithShardedPubSub(true) for that user: %q, want spublish", c.publish)
	}

	// A Redisson client that fell back listens with plain SUBSCRIBE: it
	// hears this Client's unlock.
	name := "pubsub:" + lockName(t)
	m := mustMutex(t, c, name)
	l := mustLock(t, ctx, m)
	ps := newClusterRedis(t, cl, time.Second).Subscribe(ctx, "redisson_lock__channel:{"+name+"}")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-ps.Channel():
		if msg.Payload != unlockMessage {
			t.Errorf("unlock message %q, want %q", msg.Payload, unlockMessage)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a plain SUBSCRIBE did not hear the unlock")
	}
}
