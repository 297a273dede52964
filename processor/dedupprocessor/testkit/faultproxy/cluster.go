package faultproxy

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// Cluster is a Redis Cluster whose every node is reached through a Proxy of
// its own: each node announces its proxy's port, so a client given the
// proxies' addresses learns only proxies from CLUSTER SLOTS, MOVED and ASK,
// and every command it sends, to any node, passes a proxy. The Cluster bus
// does not: the nodes see each other directly.
type Cluster struct {
	// Servers is the Cluster itself; its Topology and MasterOf report and
	// know the nodes by their proxies' addresses.
	Servers *redistest.ClusterServers
	// Proxies[i] is in front of Servers.Nodes[i], for the nodes started
	// with the Cluster (a node added later has no proxy).
	Proxies []*Proxy
}

// NewCluster starts a Redis Cluster as redistest.NewCluster does, puts a
// Proxy in front of each node and waits until every node announces its
// proxy.
func NewCluster(tb testing.TB, cfg redistest.ClusterConfig) *Cluster {
	tb.Helper()
	c := &Cluster{Servers: redistest.NewCluster(tb, cfg)}
	ports := map[*redistest.Server]int{}
	for _, n := range c.Servers.Nodes {
		p := New(tb, n.Addr())
		c.Proxies = append(c.Proxies, p)
		ports[n] = p.Port()
	}
	c.Servers.Announce(ports)
	return c
}

// Proxy returns the proxy in front of node, or nil if it has none.
func (c *Cluster) Proxy(node *redistest.Server) *Proxy {
	for i, p := range c.Proxies {
		if c.Servers.Nodes[i] == node {
			return p
		}
	}
	return nil
}

// Addrs returns the proxies' addresses, in the order of Proxies: the
// endpoints to give a client.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Proxies))
	for i, p := range c.Proxies {
		addrs[i] = p.Addr()
	}
	return addrs
}

// Client returns a cluster client that reaches the Cluster through the
// proxies; the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient { return redistest.ClusterClient(c.Addrs()) }
