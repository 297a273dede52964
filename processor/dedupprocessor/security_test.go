package dedupprocessor

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestRedisACLLimitedToKeyPrefix: the fleet's ACL user of
// deploy/redis/fleet.acl (docs/security.md), that may touch only keys under
// its key_prefix, and no admin command, is all the shared tier needs: two
// instances deliver each event once, with no error and no warning. The one
// check it refuses (CONFIG GET, for persistence) is said once at start, at
// info level.
func TestRedisACLLimitedToKeyPrefix(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(redistest.FleetACL(t, "s3cret")))
	cfg := func() *Config {
		c := redisConfig([]string{srv.Addr()}, ErrorRefuse)
		r := c.Redis.Get()
		r.Username, r.Password, r.KeyPrefix = redistest.FleetUser, "s3cret", redistest.FleetKeyPrefix
		return c
	}
	core, logs := observer.New(zap.InfoLevel)
	sinkA, sinkB := new(consumertest.LogsSink), new(consumertest.LogsSink)
	a, b := newHarness(t, cfg(), sinkA, zap.New(core)), newHarness(t, cfg(), sinkB)
	if err := a.consume(events(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if err := b.consume(events(2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	if n, m, d := sinkA.LogRecordCount(), sinkB.LogRecordCount(), b.tier("redis"); n != 3 || m != 1 || d != 2 {
		t.Fatalf("delivered %d + %d, redis duplicates %d; want 3 + 1 and 2", n, m, d)
	}
	for _, h := range []*harness{a, b} {
		for _, res := range []string{"error", "timeout", "skipped"} {
			if n := h.redisRequests("claim", res); n != 0 {
				t.Errorf("claim/%s = %d, want 0", res, n)
			}
		}
	}

	if n := logs.Filter(func(e observer.LoggedEntry) bool { return e.Level > zap.InfoLevel }).Len(); n != 0 {
		t.Errorf("%d warnings or errors: %v", n, logs.All())
	}
	unchecked := "dedup: shared tier: could not check whether Redis " + srv.Addr() + " keeps claims across a restart: appendonly is off, and the user may not run CONFIG GET save (NOPERM this user has no permissions to run the 'config|get' command); check that it takes RDB snapshots (save) or turn appendonly on, or accept that a restart lets copies through within a window"
	if n := logs.FilterMessage(unchecked).Len(); n != 1 {
		t.Errorf("%d lines %q, want 1: %v", n, unchecked, logs.All())
	}

	// The user really is confined: a key outside the prefix is refused.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: redistest.FleetUser, Password: "s3cret"})
	defer c.Close()
	if err := c.Set(context.Background(), "fleet-a:probe", "1", 0).Err(); err != nil {
		t.Fatalf("the ACL user cannot write under its prefix: %v", err)
	}
	if err := c.Set(context.Background(), "other-fleet:probe", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("writing outside the prefix: %v, want NOPERM", err)
	}
}
