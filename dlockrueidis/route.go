package dlockrueidis

// The sharded hub's routing on rueidis: which master serves a channel's
// slot, so that the hub keeps one pub/sub connection per master. rueidis
// does not expose its slot table, and its dedicated cluster connection is
// bound to one slot (a second slot panics), so the driver reads CLUSTER
// SLOTS itself and dedicates a connection of the master's node client
// (Nodes), on which SSUBSCRIBEs of any of its slots may go.

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/redis/rueidis"
)

// routeTimeout bounds one CLUSTER SLOTS.
const routeTimeout = 2 * time.Second

// slotRange is one range of CLUSTER SLOTS's answer and its master.
type slotRange struct {
	from, to int
	addr     string
}

// router caches a cluster's slot table.
type router struct {
	c rueidis.Client

	mu     sync.Mutex
	ranges []slotRange // nil until loaded
}

// hubRouter returns the pubsub.Router of d's cluster.
func (d *rdriver) hubRouter() pubsub.Router {
	r := &router{c: d.c}
	return pubsub.Router{
		Slot: func(channel string) int { return int(layout.Slot(channel)) },
		Node: r.node,
		Refresh: func(ctx context.Context) {
			r.load(ctx)
		},
	}
}

// node names the master serving channel's slot, or "" if the table cannot
// be read.
func (r *router) node(ctx context.Context, channel string) string {
	r.mu.Lock()
	loaded := r.ranges != nil
	r.mu.Unlock()
	if !loaded {
		r.load(ctx)
	}
	slot := int(layout.Slot(channel))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sr := range r.ranges {
		if sr.from <= slot && slot <= sr.to {
			return sr.addr
		}
	}
	return ""
}

// load reads CLUSTER SLOTS; on error the table stays as it was.
func (r *router) load(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), routeTimeout)
	defer cancel()
	rows, err := r.c.Do(ctx, r.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return
	}
	ranges := make([]slotRange, 0, len(rows))
	for _, row := range rows {
		f, err := row.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		from, err1 := f[0].AsInt64()
		to, err2 := f[1].AsInt64()
		m, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(m) < 2 {
			continue
		}
		host, _ := m[0].ToString()
		port, _ := m[1].AsInt64()
		ranges = append(ranges, slotRange{int(from), int(to), net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	r.mu.Lock()
	r.ranges = ranges
	r.mu.Unlock()
}

// nodeClient returns the client of the named node, or of some node when
// it is unknown (a refused SSUBSCRIBE then has the hub ask again): never
// the cluster client, whose dedicated connection serves one slot only.
func nodeClient(c rueidis.Client, addr string) rueidis.Client {
	nodes := c.Nodes()
	if n, ok := nodes[addr]; ok {
		return n
	}
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return c
	}
	slices.Sort(addrs)
	return nodes[addrs[0]]
}
