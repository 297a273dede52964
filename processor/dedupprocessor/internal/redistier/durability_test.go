package redistier

import (
	"context"
	"strings"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

// TestDurability: a server that may evict or forget claims is reported,
// naming the fix; one that keeps them is not.
func TestDurability(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, Window: testWindow})
	set := func(k, v string) {
		t.Helper()
		if err := srv.Client().ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set("maxmemory-policy", "volatile-ttl")
	set("save", "")
	set("appendonly", "no")
	got := tr.Durability(ctx)
	if len(got) != 2 || !strings.Contains(got[0], `maxmemory-policy "volatile-ttl"`) || !strings.Contains(got[0], "set maxmemory-policy noeviction") ||
		!strings.Contains(got[1], "keeps nothing on disk") || !strings.Contains(got[1], "enable appendonly") {
		t.Fatalf("Durability = %q", got)
	}
	set("maxmemory-policy", "noeviction")
	set("appendonly", "yes")
	if got := tr.Durability(ctx); len(got) != 0 {
		t.Fatalf("Durability of a server that keeps its claims = %q", got)
	}
}
