package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStandaloneKillRestartPause(t *testing.T) {
	ctx := context.Background()
	s := Standalone(t)
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("save = %q (%v), want persistence off", cfg["save"], err)
	}

	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	port := s.Port()
	s.Restart()
	if s.Port() != port {
		t.Fatalf("Restart moved the server from port %d to %d", port, s.Port())
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0, nil (no persistence)", n, err)
	}

	s.Pause()
	short := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer short.Close()
	if err := short.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered by a paused server")
	}
	s.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	// Leave it paused: the cleanup must still stop it.
	s.Pause()
}

func TestStandaloneAuth(t *testing.T) {
	ctx := context.Background()
	t.Run("requirepass", func(t *testing.T) {
		s := Standalone(t, WithPassword("s3cret pass"))
		if err := s.Client().Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		defer anon.Close()
		if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("unauthenticated PING: %v, want NOAUTH", err)
		}
	})
	t.Run("acl user", func(t *testing.T) {
		s := Standalone(t, WithACLUser("dedup", "pw"))
		who, err := s.Client().Do(ctx, "ACL", "WHOAMI").Text()
		if err != nil || who != "dedup" {
			t.Fatalf("ACL WHOAMI = %q, %v", who, err)
		}
	})
}

func TestStandaloneTLS(t *testing.T) {
	ctx := context.Background()
	s := Standalone(t, WithTLS())
	if err := s.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plain-text PING to a TLS-only server succeeded")
	}
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	c := Cluster(t, 3)
	cc := c.Client()
	defer cc.Close()
	for i := range 100 {
		if err := cc.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, n := range c.Nodes {
		size, err := n.Client().DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			t.Errorf("node %s holds no keys; slots not spread", n.Addr())
		}
		total += int(size)
	}
	if total != 100 {
		t.Fatalf("keys on all nodes = %d, want 100", total)
	}
}

func TestSentinel(t *testing.T) {
	ctx := context.Background()
	s := Sentinel(t)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.SentinelAddr()}})
	defer fc.Close()
	if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Master.Client().Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k on the master = %q, %v", v, err)
	}
}

func TestReplica(t *testing.T) {
	ctx := context.Background()
	m := Standalone(t, WithPassword("pw"), WithConfig("repl-diskless-sync-delay 0"))
	r := Replica(t, m)
	if err := m.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	role, err := r.Client().Do(ctx, "role").Slice()
	if err != nil || len(role) < 3 || role[0] != "slave" || role[2] != int64(m.Port()) {
		t.Fatalf("ROLE on the replica = %v, %v; want slave of port %d", role, err, m.Port())
	}
	waitFor(t, 5*time.Second, "write replicated", func() (bool, string) {
		v, err := r.Client().Get(ctx, "k").Result()
		return err == nil && v == "v", v
	})
	if err := r.Client().Set(ctx, "k", "w", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("SET on the replica: %v, want READONLY", err)
	}
}

// TestClusterChanges: a Cluster with replicas survives a killed master (its
// replica takes its slots), a manual failover, a new master and a reshard,
// and the helpers report each change.
func TestClusterChanges(t *testing.T) {
	ctx := context.Background()
	c := NewCluster(t, ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: time.Second})
	if len(c.Nodes) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, %d addresses; want 6", len(c.Nodes), len(c.Addrs()))
	}
	master, replica := c.MasterOf(0)
	if master == nil || replica == nil || master == replica {
		t.Fatalf("slot 0: master %v, replica %v", master, replica)
	}

	master.Kill()
	c.WaitHealthy()
	if m, _ := c.MasterOf(0); m != replica {
		t.Fatalf("slot 0 served by %s after its master died, want the replica %s", m.Addr(), replica.Addr())
	}

	m2, r2 := c.MasterOf(16383)
	c.Failover(r2)
	if m, r := c.MasterOf(16383); m != r2 || r != m2 {
		t.Fatalf("after CLUSTER FAILOVER slot 16383: master %s, replica %v; want %s, %s", m.Addr(), r, r2.Addr(), m2.Addr())
	}

	added := c.AddMaster()
	c.Reshard(replica, added, 10, 10)
	if m, _ := c.MasterOf(0); m != added {
		t.Fatalf("slot 0 served by %s after the reshard, want the new master %s", m.Addr(), added.Addr())
	}
	// A client following the map reaches the moved slot; the old owner
	// answered MOVED to the stale one.
	stale := replica.Client()
	if err := stale.Set(ctx, "{06S}k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("SET of a slot-0 key on its old owner: %v, want MOVED", err)
	}
	if n := c.ErrorStats()["MOVED"]; n < 1 {
		t.Fatalf("errorstat MOVED = %d, want >= 1", n)
	}
}
