package dedupprocessor

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

// redisACL is the ACL the README's Security section recommends for a fleet
// whose key_prefix is "fleet-a:": its own keys only, no admin or dangerous
// commands beyond the two start-up questions (INFO, ROLE).
const redisACL = "user fleet-a on >s3cret resetkeys ~fleet-a:* resetchannels -@all +@read +@write +@scripting +@connection +info +role +time"

// TestRedisACLLimitedToKeyPrefix: a fleet's ACL user that may touch only
// keys under its key_prefix, and no admin command, is all the shared tier
// needs: two instances deliver each event once, with no error.
func TestRedisACLLimitedToKeyPrefix(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(redisACL))
	cfg := func() *Config {
		c := redisConfig([]string{srv.Addr()}, ErrorRefuse)
		r := c.Redis.Get()
		r.Username, r.Password, r.KeyPrefix = "fleet-a", "s3cret", "fleet-a:"
		return c
	}
	sinkA, sinkB := new(consumertest.LogsSink), new(consumertest.LogsSink)
	a, b := newHarness(t, cfg(), sinkA), newHarness(t, cfg(), sinkB)
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

	// The user really is confined: a key outside the prefix is refused.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "fleet-a", Password: "s3cret"})
	defer c.Close()
	if err := c.Set(context.Background(), "fleet-a:probe", "1", 0).Err(); err != nil {
		t.Fatalf("the ACL user cannot write under its prefix: %v", err)
	}
	if err := c.Set(context.Background(), "other-fleet:probe", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("writing outside the prefix: %v, want NOPERM", err)
	}
}
