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
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/layout"
	"github.com/dlock-go/dlock/internal/pubsub"
	"github.com/redis/rueidis"
)

// routeTimeout bounds one CLUSTER SLOTS, within its caller's ctx.
const routeTimeout = pubsub.ReloadLimit

// slotRange is one range of CLUSTER SLOTS's answer and its master.
type slotRange struct {
	from, to int
	addr     string
}

// router caches a cluster's slot table. The table is read once, by the
// first lookup, and then only when the hub asks for it (Refresh): a lookup
// never waits for CLUSTER SLOTS again, even while the table could not be
// read, and concurrent reloads share one CLUSTER SLOTS (pubsub.Coalesce).
type router struct {
	c       rueidis.Client
	refresh func(ctx context.Context) // load, coalesced
	loads   atomic.Int64              // CLUSTER SLOTS sent, for tests

	mu     sync.Mutex
	ranges []slotRange // nil until loaded
	tried  bool        // a load has ended, loaded or not
}

func newRouter(c rueidis.Client) *router {
	r := &router{c: c}
	r.refresh = pubsub.Coalesce(r.load)
	return r
}

// hubRouter returns the pubsub.Router of d's cluster.
func (d *rdriver) hubRouter() pubsub.Router { return newRouter(d.c).hubRouter() }

// hubRouter returns r as a pubsub.Router.
func (r *router) hubRouter() pubsub.Router {
	return pubsub.Router{
		Slot:    func(channel string) int { return int(layout.Slot(channel)) },
		Node:    r.node,
		Refresh: r.refresh,
	}
}

// node names the master serving channel's slot, or "" if the table does
// not say. Only the lookups before the first load has ended load it.
func (r *router) node(ctx context.Context, channel string) string {
	r.mu.Lock()
	first := !r.tried
	r.mu.Unlock()
	if first {
		r.refresh(ctx)
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

// load reads CLUSTER SLOTS and waits for it within ctx (pubsub.Reload:
// rueidis keeps only the deadline while it dials); on error the table
// stays as it was. A read its caller left applies its answer when it
// comes.
func (r *router) load(ctx context.Context) {
	r.loads.Add(1)
	if !pubsub.Reload(ctx, func(ctx context.Context) {
		rows, err := r.c.Do(ctx, r.c.B().ClusterSlots().Build()).ToArray()
		r.ended(rows, err)
	}) {
		r.ended(nil, ctx.Err())
	}
}

// ended records that a load ended, with the table read or err.
func (r *router) ended(rows []rueidis.RedisMessage, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tried = true
	if err == nil {
		r.ranges = parseSlots(rows)
	}
}

// parseSlots reads the ranges of a CLUSTER SLOTS answer, skipping rows it
// cannot read.
func parseSlots(rows []rueidis.RedisMessage) []slotRange {
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
	return ranges
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
