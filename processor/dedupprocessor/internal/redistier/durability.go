package redistier

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claims are only as durable as the server that holds them. Two server
// settings can free claims behind the tier's back: an eviction policy
// other than noeviction evicts keys under memory pressure (volatile-ttl
// first evicts the pending claims, whose TTL is the shortest), and a server
// that keeps nothing on disk forgets every claim when it restarts. Either
// lets copies through: delivered records are no longer remembered.

// Durability reports, for each master the tier reaches, what in its
// settings can free claims, as sentences that name the fix. It asks
// CONFIG GET, which managed services and ACL users may refuse: a server
// that does not answer is left out, not reported.
func (t *Tier) Durability(ctx context.Context) []string {
	c := t.conn.Load()
	if c == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, max(t.timeout, time.Second))
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
	switch x := c.exec.(type) {
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
