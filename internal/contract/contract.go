// Package contract is the contract every lock kind keeps, written once and
// run for each kind on each transport (in the spirit of testing/fstest's
// TestFS): reentrancy, fencing, the notice of a lost lock, a waiter that
// missed the unlock message, force unlock, IsLocked/HoldCount/TTL, nil
// contexts and zero values, options of other kinds, and Close.
// Kind-specific rules (a fair lock's queue, a read-write lock's modes,
// RedLock's quorum) stay in the kinds' own tests.
//
// It exists so that dlock on go-redis (package dlock's TestContract) and
// dlock on rueidis (dlockrueidis's TestContract) are held to the same
// rules by the same code: the caller supplies a Topology, which makes
// Clients of its transport on each deployment, and the suite checks Redis
// itself with a go-redis client of its own, which is no part of the
// transport under test. Only tests import it; it is never compiled into a
// user's build.
package contract

import (
	"context"
	"net"
	"testing"

	"github.com/dlock-go/dlock"
)

// Dialer makes a connection to addr, as net.Dialer.DialContext does.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Deployment is one Redis deployment, and how to make Clients of the
// transport under test on it.
type Deployment struct {
	// Name names the deployment's subtests ("Single", "Sentinel",
	// "Cluster").
	Name string
	// Client returns a new dlock Client on the deployment, on connections
	// of its own, closed when t ends. When dial is not nil, every
	// connection of the Client must be made by it: the suite shuts it to
	// keep the Client from reaching Redis.
	Client func(t testing.TB, dial Dialer, opts ...dlock.Option) *dlock.Client
	// Masters returns the addresses of the deployment's masters, where
	// the suite checks keys and subscriptions (read at each check: a
	// Sentinel's master may have changed since the last test).
	Masters func() []string
	// Cluster is set when Masters are one cluster's: a key is on the
	// master of its slot.
	Cluster bool
}

// Topology is what the suite runs on: the deployments of one transport.
type Topology struct {
	// Single, Sentinel and Cluster run every kind but RedLock; a nil one
	// is not run.
	Single, Sentinel, Cluster *Deployment
	// Servers, when set, starts n independent single servers (closed
	// with t), on which the suite runs RedLock.
	Servers func(t testing.TB, n int) []*Deployment
	// Renewals, when set, returns how many locks c's watchdog renews: the
	// suite checks that an Unlock stops the renewals.
	Renewals func(c *dlock.Client) int
	// Skip names the tests (as in the tests list: "MissedNotice") that
	// the deployments cannot run, each with the reason, which the skip
	// reports: a server without CLIENT KILL cannot cut a subscription.
	Skip map[string]string
}

// tests are the contract's tests, in the order they run.
var tests = []struct {
	name string
	run  func(k *contract, name string)
}{
	{"Reentrancy", (*contract).reentrancy},
	{"Fencing", (*contract).fencing},
	{"LostLock", (*contract).lostLock},
	{"MissedNotice", (*contract).missedNotice},
	{"ForceUnlock", (*contract).forceUnlock},
	{"Inspect", (*contract).inspect},
	{"BadInput", (*contract).badInput},
	{"Close", (*contract).close},
}

// Run runs the contract of every kind on every deployment of topo, as
// subtests named deployment/kind/test: the kinds of one server on
// Single, Sentinel and Cluster, and RedLock on three Servers (subtest
// "Servers/RedLock").
func Run(t *testing.T, topo Topology) {
	for _, d := range []*Deployment{topo.Single, topo.Sentinel, topo.Cluster} {
		if d == nil {
			continue
		}
		t.Run(d.Name, func(t *testing.T) {
			for _, kind := range oneDeploymentKinds() {
				runKind(t, topo, kind, func(t *testing.T) []*Deployment { return []*Deployment{d} })
			}
		})
	}
	if topo.Servers != nil {
		t.Run("Servers", func(t *testing.T) {
			runKind(t, topo, redLockKind(), func(t *testing.T) []*Deployment { return topo.Servers(t, 3) })
		})
	}
}

// runKind runs kind's contract on the deployments that setup returns.
func runKind(t *testing.T, topo Topology, kind kind, setup func(t *testing.T) []*Deployment) {
	t.Run(kind.name, func(t *testing.T) {
		k := &contract{kind: kind, t: t, deployments: setup(t), renewals: topo.Renewals}
		for _, c := range tests {
			t.Run(c.name, func(t *testing.T) {
				if why, ok := topo.Skip[c.name]; ok {
					t.Skip(why)
				}
				sub := *k
				sub.t = t
				c.run(&sub, sub.lockName())
			})
		}
	})
}
