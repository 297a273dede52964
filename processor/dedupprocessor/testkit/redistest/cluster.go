package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

const (
	// cliTimeout bounds each redis-cli --cluster command (create, reshard,
	// add-node, rebalance).
	cliTimeout = 2 * time.Minute
	// clusterTimeout bounds the waits for the Cluster to settle after a
	// change (create, a failover, a new node).
	clusterTimeout = 30 * time.Second
	// defaultNodeTimeout is cluster-node-timeout unless ClusterConfig says.
	defaultNodeTimeout = 2 * time.Second
)

// ClusterConfig describes a Redis Cluster to start.
type ClusterConfig struct {
	// Masters is the number of masters (at least 3).
	Masters int
	// Replicas is the number of replicas of each master.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node may not answer
	// before the others declare it failed and promote its replica. Default
	// 2 s.
	NodeTimeout time.Duration
	// Config holds further redis.conf lines for every node.
	Config []string
}

// ClusterServers is a Redis Cluster of cluster-enabled redis-servers. Its
// methods fail the test on error.
type ClusterServers struct {
	tb  testkit.TB
	cfg ClusterConfig
	mu  sync.Mutex
	// Nodes are the nodes started at creation: the masters first, then the
	// replicas. AddMaster appends to it.
	Nodes []*Server
	first int // len(Nodes) at creation
}

// Cluster starts a Redis Cluster of masters masters without replicas (see
// NewCluster).
func Cluster(tb testkit.TB, masters int) *ClusterServers {
	tb.Helper()
	return NewCluster(tb, ClusterConfig{Masters: masters})
}

// NewCluster starts cfg.Masters*(1+cfg.Replicas) cluster-enabled
// redis-servers on free loopback ports, joins them with `redis-cli --cluster
// create --cluster-replicas`, which gives each master an even share of the
// slots and cfg.Replicas replicas, and waits until every node reports
// cluster_state:ok, knows every other node, and every replica is in sync.
func NewCluster(tb testkit.TB, cfg ClusterConfig) *ClusterServers {
	tb.Helper()
	if cfg.Masters < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", cfg.Masters)
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = defaultNodeTimeout
	}
	c := &ClusterServers{tb: tb, cfg: cfg}
	for range cfg.Masters * (1 + cfg.Replicas) {
		c.Nodes = append(c.Nodes, c.startNode())
	}
	c.first = len(c.Nodes)
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	c.CLI(args...)
	c.WaitHealthy()
	return c
}

func (c *ClusterServers) startNode() *Server {
	s := newServer(c.tb, config{extra: c.cfg.Config})
	s.cluster = true
	s.nodeTimeout = c.cfg.NodeTimeout
	s.startFresh()
	return s
}

// Addrs returns the endpoints of the nodes started at creation, masters
// first.
func (c *ClusterServers) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	addrs := make([]string, c.first)
	for i, n := range c.Nodes[:c.first] {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a cluster client for assertions; the caller closes it.
func (c *ClusterServers) Client() *redis.ClusterClient { return ClusterClient(c.Addrs()) }

// ClusterClient returns a cluster client of the tests' timeouts that starts
// from addrs; the caller closes it.
func ClusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    addrs,
		DialTimeout:              5 * time.Second,
		ReadTimeout:              5 * time.Second,
		WriteTimeout:             5 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// CLI runs redis-cli with args (e.g. "--cluster", "reshard", ...), bounded
// by cliTimeout, and returns its output.
func (c *ClusterServers) CLI(args ...string) string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, LookPath(c.tb, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		c.tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// running returns the nodes whose process runs and is not paused.
func (c *ClusterServers) running() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Server
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// byAddr returns the node with the given address, its own or the one it
// announces, or nil.
func (c *ClusterServers) byAddr(addr string) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.Nodes {
		if n.Addr() == addr || n.announcedAddr() == addr {
			return n
		}
	}
	return nil
}

// Announce makes each node in ports announce its port there instead of its
// own, to the other nodes and to clients (CLUSTER SLOTS, CLUSTER NODES,
// MOVED, ASK), as a node behind a proxy does; the Cluster bus stays on the
// node's own bus port. The settings are written to each node's config file,
// so they survive Restart, and Topology and MasterOf know a node by its
// announced address. Announce waits until every running node sees every
// node of ports at its announced address.
func (c *ClusterServers) Announce(ports map[*Server]int) {
	c.tb.Helper()
	ctx := context.Background()
	for n, port := range ports {
		cl := n.Client()
		for _, kv := range [][2]string{
			{"cluster-announce-ip", "127.0.0.1"},
			{"cluster-announce-port", strconv.Itoa(port)},
			{"cluster-announce-bus-port", strconv.Itoa(n.busPort)},
		} {
			if err := cl.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				c.tb.Fatalf("redistest: CONFIG SET %s %s on %s: %v", kv[0], kv[1], n.Addr(), err)
			}
		}
		if err := cl.ConfigRewrite(ctx).Err(); err != nil {
			c.tb.Fatalf("redistest: CONFIG REWRITE on %s: %v", n.Addr(), err)
		}
		n.mu.Lock()
		n.announced = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		n.mu.Unlock()
	}
	waitFor(c.tb, clusterTimeout, "announced addresses known to every node", func() (bool, string) {
		for _, seer := range c.running() {
			txt, err := seer.Client().ClusterNodes(ctx).Result()
			if err != nil {
				return false, seer.Addr() + ": " + err.Error()
			}
			for n := range ports {
				if !strings.Contains(txt, " "+n.announcedAddr()+"@"+strconv.Itoa(n.busPort)) {
					return false, seer.Addr() + " does not see " + n.announcedAddr()
				}
			}
		}
		return true, ""
	})
}

// WaitHealthy waits, bounded, until every running node reports
// cluster_state:ok with all 16384 slots served, knows as many nodes as
// were started, and every running replica's link to its master is up.
func (c *ClusterServers) WaitHealthy() {
	c.tb.Helper()
	c.mu.Lock()
	known := "cluster_known_nodes:" + strconv.Itoa(len(c.Nodes)) + "\r\n"
	c.mu.Unlock()
	ctx := context.Background()
	waitFor(c.tb, clusterTimeout, "Redis Cluster healthy", func() (bool, string) {
		for _, n := range c.running() {
			info, err := n.Client().ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") || !strings.Contains(info, known) {
				return false, fmt.Sprintf("%s: %v %s", n.Addr(), err, info)
			}
			repl, err := n.Client().Info(ctx, "replication").Result()
			if err != nil {
				return false, n.Addr() + ": " + err.Error()
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return false, n.Addr() + ": replica link down"
			}
		}
		return true, ""
	})
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID, Addr, MasterID string
	Flags              []string
	Slots              [][2]int // served slot ranges, inclusive
}

// Has reports whether the node has flag f (master, slave, fail, myself...).
func (n ClusterNode) Has(f string) bool {
	for _, x := range n.Flags {
		if x == f {
			return true
		}
	}
	return false
}

// Serves reports whether the node serves slot.
func (n ClusterNode) Serves(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// Topology returns CLUSTER NODES as a running node sees it.
func (c *ClusterServers) Topology() []ClusterNode {
	c.tb.Helper()
	var lastErr error
	for _, n := range c.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		txt, err := n.Client().ClusterNodes(ctx).Result()
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		var out []ClusterNode
		for _, line := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			addr := f[1]
			if i := strings.IndexAny(addr, "@,"); i >= 0 {
				addr = addr[:i]
			}
			cn := ClusterNode{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ","), MasterID: f[3]}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") {
					continue // a slot being migrated or imported
				}
				lo, hi, ok := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if ok {
					b, _ = strconv.Atoi(hi)
				}
				cn.Slots = append(cn.Slots, [2]int{a, b})
			}
			out = append(out, cn)
		}
		return out
	}
	c.tb.Fatalf("redistest: no running node answered CLUSTER NODES: %v", lastErr)
	return nil
}

// MasterOf returns the node that serves slot and one of its replicas in
// sync (nil if it has none).
func (c *ClusterServers) MasterOf(slot int) (master, replica *Server) {
	c.tb.Helper()
	nodes := c.Topology()
	for _, n := range nodes {
		if !n.Has("master") || n.Has("fail") || !n.Serves(slot) {
			continue
		}
		master = c.byAddr(n.Addr)
		for _, r := range nodes {
			if r.MasterID == n.ID && !r.Has("fail") && !r.Has("fail?") {
				replica = c.byAddr(r.Addr)
			}
		}
		return master, replica
	}
	c.tb.Fatalf("redistest: no master serves slot %d", slot)
	return nil, nil
}

// NodeID returns the Cluster node ID of s.
func (c *ClusterServers) NodeID(s *Server) string {
	c.tb.Helper()
	id, err := s.Client().Do(context.Background(), "cluster", "myid").Text()
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr(), err)
	}
	return id
}

// Failover makes replica take over from its master with CLUSTER FAILOVER
// (the manual failover: the master stops writes until the replica caught
// up, then the replica is promoted) and waits until the Cluster is healthy,
// with replica serving the slots and its old master following it.
func (c *ClusterServers) Failover(replica *Server) {
	c.tb.Helper()
	id := c.NodeID(replica)
	var oldID string
	for _, n := range c.Topology() {
		if n.ID == id {
			oldID = n.MasterID
		}
	}
	if err := replica.Client().Do(context.Background(), "cluster", "failover").Err(); err != nil {
		c.tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
	}
	waitFor(c.tb, clusterTimeout, "replica promoted, its master demoted", func() (bool, string) {
		promoted, demoted := false, false
		for _, n := range c.Topology() {
			switch n.ID {
			case id:
				promoted = n.Has("master") && len(n.Slots) > 0
			case oldID:
				demoted = n.Has("slave") && n.MasterID == id
			}
		}
		return promoted && demoted, fmt.Sprintf("promoted %v, demoted %v", promoted, demoted)
	})
	c.WaitHealthy()
}

// Reshard moves slots slots from master from to master to with `redis-cli
// --cluster reshard`, while the Cluster serves: each slot is marked
// migrating and importing, its keys are moved with MIGRATE (pipeline keys at
// a time), then the slot is assigned to to.
func (c *ClusterServers) Reshard(from, to *Server, slots, pipeline int) {
	c.tb.Helper()
	c.CLI("--cluster", "reshard", from.Addr(),
		"--cluster-from", c.NodeID(from), "--cluster-to", c.NodeID(to),
		"--cluster-slots", strconv.Itoa(slots), "--cluster-pipeline", strconv.Itoa(pipeline), "--cluster-yes")
}

// AddMaster starts a node, joins it as a master without slots (`redis-cli
// --cluster add-node`) and waits until every node knows it.
func (c *ClusterServers) AddMaster() *Server {
	c.tb.Helper()
	s := c.startNode()
	seed := c.running()[0]
	c.mu.Lock()
	c.Nodes = append(c.Nodes, s)
	c.mu.Unlock()
	c.CLI("--cluster", "add-node", s.Addr(), seed.Addr())
	c.WaitHealthy()
	return s
}

// Rebalance gives every master, the empty ones included, an even share of
// the slots (`redis-cli --cluster rebalance --cluster-use-empty-masters`),
// moving pipeline keys at a time, and waits until the Cluster is healthy.
func (c *ClusterServers) Rebalance(pipeline int) {
	c.tb.Helper()
	c.CLI("--cluster", "rebalance", c.running()[0].Addr(), "--cluster-use-empty-masters",
		"--cluster-pipeline", strconv.Itoa(pipeline), "--cluster-yes")
	c.WaitHealthy()
}

var errorStatRE = regexp.MustCompile(`(?m)^errorstat_([A-Z]+):count=(\d+)`)

// ErrorStats sums, over the running nodes, the error replies they sent, by
// error code (INFO errorstats: MOVED, ASK, TRYAGAIN, CLUSTERDOWN, ...).
func (c *ClusterServers) ErrorStats() map[string]int64 {
	c.tb.Helper()
	sum := map[string]int64{}
	for _, n := range c.running() {
		info, err := n.Client().Info(context.Background(), "errorstats").Result()
		if err != nil {
			c.tb.Fatalf("redistest: INFO errorstats on %s: %v", n.Addr(), err)
		}
		for _, m := range errorStatRE.FindAllStringSubmatch(info, -1) {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			sum[m[1]] += v
		}
	}
	return sum
}

// waitFor is testkit.WaitFor for a condition that also says what it saw,
// which the failure reports.
func waitFor(tb testkit.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	var seen string
	testkit.WaitFor(tb, "redistest: "+what, timeout, func() bool {
		ok, d := cond()
		seen = d
		return ok
	}, func() string { return seen })
}
