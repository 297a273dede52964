package faultproxy

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

var setStatsRE = regexp.MustCompile(`cmdstat_set:calls=(\d+),.*rejected_calls=(\d+)`)

// setsRun returns the SETs node took, those it refused with MOVED included.
func setsRun(t *testing.T, node *redistest.Server) int {
	t.Helper()
	info, err := node.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := setStatsRE.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	calls, _ := strconv.Atoi(m[1])
	rejected, _ := strconv.Atoi(m[2])
	return calls + rejected
}

// TestClusterThroughProxies: a ClusterClient given the proxies' addresses
// sends every command through them, after a MOVED and the slot map reload
// that follows it too.
func TestClusterThroughProxies(t *testing.T) {
	ctx := context.Background()
	c := NewCluster(t, redistest.ClusterConfig{Masters: 3})
	cc := c.Client()
	defer cc.Close()
	set := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", k, err)
			}
		}
	}
	// Each node took exactly the SETs its proxy passed.
	allThroughProxies := func() {
		t.Helper()
		for i, node := range c.Servers.Nodes {
			if run, passed := setsRun(t, node), c.Proxies[i].Count("SET"); run != passed || run == 0 {
				t.Fatalf("node %s took %d SETs, its proxy passed %d; want the same, > 0", node.Addr(), run, passed)
			}
		}
		proxies := map[string]bool{}
		for _, a := range c.Addrs() {
			proxies[a] = true
		}
		if err := cc.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
			if !proxies[n.Options().Addr] {
				return fmt.Errorf("the client reaches %s, not a proxy", n.Options().Addr)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		set("k" + strconv.Itoa(i))
	}
	allThroughProxies()

	// Move slot 0 (key {06S}k) under the client's feet: its old owner
	// answers MOVED with the new owner's proxy.
	from, _ := c.Servers.MasterOf(0)
	to, _ := c.Servers.MasterOf(16383)
	c.Servers.Reshard(from, to, 10, 10)
	if m, _ := c.Servers.MasterOf(0); m != to {
		t.Fatalf("slot 0 served by %v after the reshard, want %s", m, to.Addr())
	}
	direct := redis.NewClient(&redis.Options{Addr: c.Proxy(from).Addr(), MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer direct.Close()
	want := "MOVED 0 " + c.Proxy(to).Addr()
	if err := direct.Set(ctx, "{06S}k", "v", 0).Err(); err == nil || err.Error() != want {
		t.Fatalf("SET of a moved slot on its old owner's proxy: %v, want %q", err, want)
	}
	set("{06S}k")
	for i := range 100 {
		set("{06S}" + strconv.Itoa(i))
	}
	allThroughProxies()
	if v, err := to.Client().Get(ctx, "{06S}k").Result(); err != nil || v != "v" {
		t.Fatalf("{06S}k on the new owner = %q, %v", v, err)
	}

	// A restarted node still announces its proxy.
	proxyOf := map[string]string{} // node ID: its proxy's address
	for i, n := range c.Servers.Nodes {
		proxyOf[c.Servers.NodeID(n)] = c.Proxies[i].Addr()
	}
	to.Restart()
	c.Servers.WaitHealthy()
	for _, n := range c.Servers.Topology() {
		if n.Addr != proxyOf[n.ID] {
			t.Fatalf("after a restart, node %s is announced at %s, want its proxy %s", n.ID, n.Addr, proxyOf[n.ID])
		}
	}
}

// TestClusterFaultOnOneMaster: replies dropped by one master's proxy fail
// that master's commands only; the commands themselves ran.
func TestClusterFaultOnOneMaster(t *testing.T) {
	ctx := context.Background()
	c := NewCluster(t, redistest.ClusterConfig{Masters: 3})
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		DialTimeout:              5 * time.Second,
		ReadTimeout:              200 * time.Millisecond,
		WriteTimeout:             200 * time.Millisecond,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer cc.Close()

	// One key on each master.
	keys := map[*redistest.Server]string{}
	for i := 0; len(keys) < 3; i++ {
		k := "k" + strconv.Itoa(i)
		slot, err := c.Servers.Nodes[0].Client().ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := c.Servers.MasterOf(int(slot)); keys[m] == "" {
			keys[m] = k
		}
	}
	for _, k := range keys {
		if err := cc.Set(ctx, k, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	victim := c.Servers.Nodes[0]
	c.Proxy(victim).Add(&Rule{Fault: DropReply()})
	for m, k := range keys {
		err := cc.Set(ctx, k, "after", 0).Err()
		if m == victim && !isTimeout(err) {
			t.Errorf("SET %s on the master whose replies are dropped: %v, want a timeout", k, err)
		}
		if m != victim && err != nil {
			t.Errorf("SET %s on a healthy master: %v", k, err)
		}
		testkit.WaitFor(t, k+" set on its master", waitTimeout, func() bool {
			v, err := m.Client().Get(ctx, k).Result()
			return err == nil && v == "after"
		})
	}
}
