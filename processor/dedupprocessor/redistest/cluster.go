package redistest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// createTimeout bounds `redis-cli --cluster create`.
const createTimeout = 30 * time.Second

// ClusterServers is a Redis Cluster of masters without replicas.
type ClusterServers struct {
	tb    testing.TB
	Nodes []*Server
}

// Addrs returns the endpoints of all masters.
func (c *ClusterServers) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a cluster client for assertions; the caller closes it.
func (c *ClusterServers) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		DialTimeout:              5 * time.Second,
		ReadTimeout:              5 * time.Second,
		WriteTimeout:             5 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Cluster starts masters (at least 3) cluster-enabled redis-servers on free
// loopback ports, joins them with `redis-cli --cluster create`, and waits
// until every node reports cluster_state:ok and knows every other node.
func Cluster(tb testing.TB, masters int) *ClusterServers {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	c := &ClusterServers{tb: tb}
	for range masters {
		s := newServer(tb, config{})
		s.cluster = true
		s.startFresh()
		c.Nodes = append(c.Nodes, s)
	}

	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, LookPath(tb, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}

	want := "cluster_known_nodes:" + itoa(masters)
	deadline := time.Now().Add(readyTimeout)
	for _, n := range c.Nodes {
		for {
			info, err := n.Client().ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ready within %s: %v\n%s", n.Addr(), readyTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}
