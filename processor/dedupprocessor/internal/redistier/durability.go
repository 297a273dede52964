package redistier

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability names, per master reached, the settings that can free claims
// behind the tier's back (eviction, no persistence), with the fix; a server
// refusing CONFIG GET is left out. Needs a known Mode.
func (t *Tier) Durability(ctx context.Context) []string {
	cctx, cancel := context.WithTimeout(ctx, max(t.opts.Timeout, time.Second))
	defer cancel()
	var mu sync.Mutex // ForEachMaster asks the masters at once
	var out []string
	check := func(ctx context.Context, node string, client *redis.Client) {
		cfg, err := client.ConfigGet(ctx, "*").Result() // one round trip for every setting below
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p, ok := cfg["maxmemory-policy"]; ok && p != "noeviction" {
			out = append(out, fmt.Sprintf("Redis %s has maxmemory-policy %q: once it reaches maxmemory it evicts claims, and copies of delivered records get through; set maxmemory-policy noeviction and give it the memory the window needs", node, p))
		}
		if cfg["save"] == "" && cfg["appendonly"] != "yes" {
			out = append(out, fmt.Sprintf("Redis %s keeps nothing on disk (save \"\", appendonly no): a restart forgets every claim, and copies arriving within the window after it get through; enable appendonly or RDB snapshots, or accept that", node))
		}
	}
	switch x := t.conn.Load().exec.(type) {
	case *singleExec:
		check(cctx, x.name, x.client)
	case *clusterExec:
		_ = x.cc.ForEachMaster(cctx, func(ctx context.Context, client *redis.Client) error {
			check(ctx, client.Options().Addr, client)
			return nil
		})
	}
	return out
}
