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
