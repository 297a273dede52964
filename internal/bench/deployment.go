package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Topologies of a RedisDeployment.
const (
	TopologyStandalone = "standalone"
	TopologyCluster    = "cluster"
)

// clusterCreateTimeout bounds `redis-cli --cluster create` and the wait for
// every node to see the Cluster as ok.
const clusterCreateTimeout = 30 * time.Second

// RedisDeployment is the Redis a fleet of collectors shares: one standalone
// redis-server, or the masters (no replicas) of a Redis Cluster, each a
// process the driver started and stops by PID.
type RedisDeployment struct {
	Topology string
	Nodes    []*RedisServer
}

// StartStandalone starts one redis-server.
func StartStandalone(serverBin string) (*RedisDeployment, error) {
	s, err := StartRedis(serverBin)
	if err != nil {
		return nil, err
	}
	return &RedisDeployment{Topology: TopologyStandalone, Nodes: []*RedisServer{s}}, nil
}

// StartCluster starts masters cluster-enabled redis-servers (at least 3),
// joins them with `redis-cli --cluster create` (the even slot split) and
// waits until every node reports cluster_state:ok and knows every other.
func StartCluster(ctx context.Context, serverBin, cliBin string, masters int) (*RedisDeployment, error) {
	if masters < 3 {
		return nil, fmt.Errorf("a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	d := &RedisDeployment{Topology: TopologyCluster}
	for range masters {
		s, err := startRedisRetrying(serverBin, true)
		if err != nil {
			d.Stop()
			return nil, err
		}
		d.Nodes = append(d.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(ctx, clusterCreateTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, d.Endpoints()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cliBin, args...).CombinedOutput(); err != nil {
		d.Stop()
		return nil, fmt.Errorf("%s %s: %w\n%s", cliBin, strings.Join(args, " "), err, out)
	}
	want := fmt.Sprintf("cluster_known_nodes:%d", masters)
	for _, n := range d.Nodes {
		for {
			info, err := n.client.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if ctx.Err() != nil {
				d.Stop()
				return nil, fmt.Errorf("cluster node %s not ready within %s: %v", n.Addr, clusterCreateTimeout, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return d, nil
}

// Endpoints are the nodes' addresses: a collector's redis.endpoints.
func (d *RedisDeployment) Endpoints() []string {
	out := make([]string, len(d.Nodes))
	for i, n := range d.Nodes {
		out[i] = n.Addr
	}
	return out
}

// PIDs are the nodes' process ids.
func (d *RedisDeployment) PIDs() []int {
	out := make([]int, len(d.Nodes))
	for i, n := range d.Nodes {
		out[i] = n.PID()
	}
	return out
}

// FlushAll empties every node and resets its command statistics.
func (d *RedisDeployment) FlushAll(ctx context.Context) error {
	var errs []error
	for _, n := range d.Nodes {
		errs = append(errs, n.FlushAll(ctx))
	}
	return errors.Join(errs...)
}

// Counts sums the INFO counts of every node, and returns each node's too.
func (d *RedisDeployment) Counts(ctx context.Context) (RedisCounts, []RedisCounts, error) {
	sum := RedisCounts{Calls: map[string]int64{}, Usec: map[string]int64{}}
	per := make([]RedisCounts, len(d.Nodes))
	for i, n := range d.Nodes {
		c, err := redisCounts(ctx, n)
		if err != nil {
			return sum, nil, fmt.Errorf("%s: %w", n.Addr, err)
		}
		per[i] = c
		sum = sum.add(c)
	}
	return sum, per, nil
}

// HashTags counts the keys of every node by their Cluster hash tag (SCAN),
// "" for keys without one: how many tags a processor's keys use, and so how
// many masters they can reach.
func (d *RedisDeployment) HashTags(ctx context.Context) (map[string]int64, error) {
	tags := map[string]int64{}
	for _, n := range d.Nodes {
		iter := n.client.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			tags[hashTag(iter.Val())]++
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("SCAN %s: %w", n.Addr, err)
		}
	}
	return tags, nil
}

// hashTag is the part of key Redis Cluster hashes when it has a hash tag:
// what lies between the first '{' and the first '}' after it, if not empty;
// "" otherwise (the whole key is hashed).
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// Stop stops every node by PID.
func (d *RedisDeployment) Stop() {
	for _, n := range d.Nodes {
		n.Stop()
	}
}
