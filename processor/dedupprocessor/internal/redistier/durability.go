package redistier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability names, per master reached, the settings that can free claims
// behind the tier's back (eviction, no persistence), with the fix. INFO,
// which the fleet's ACL grants, tells the eviction policy and whether the
// append-only file is on; only a master without it is asked CONFIG GET save
// (whether it takes RDB snapshots), which that ACL refuses: it would show the
// user the server's passwords (requirepass, masterauth). What a refusal left
// unchecked is said in unchecked, naming the masters. Needs a known Mode.
func (t *Tier) Durability(ctx context.Context) (warnings []string, unchecked string) {
	cctx, cancel := context.WithTimeout(ctx, max(t.opts.Timeout, time.Second))
	defer cancel()
	var mu sync.Mutex // ForEachMaster asks the masters at once
	var out []string
	var refused [2][]string // by uncheckedFormats' index: the masters
	var refusal [2]error
	check := func(ctx context.Context, node string, client *redis.Client) {
		info, err := client.Info(ctx).Result() // the default sections: memory, persistence
		policy, aof := infoField(info, "maxmemory_policy"), infoField(info, "aof_enabled") == "1"
		var save map[string]string
		kind := 0
		if err == nil && !aof {
			kind = 1
			save, err = client.ConfigGet(ctx, "save").Result()
		}
		mu.Lock()
		defer mu.Unlock()
		if policy != "" && policy != "noeviction" {
			out = append(out, fmt.Sprintf("Redis %s has maxmemory-policy %q: once it reaches maxmemory it evicts claims, and copies of delivered records get through; set maxmemory-policy noeviction and give it the memory the window needs", node, policy))
		}
		switch {
		case Denied(err):
			refused[kind], refusal[kind] = append(refused[kind], node), err
		case err == nil && !aof && save["save"] == "":
			out = append(out, fmt.Sprintf("Redis %s keeps nothing on disk (save \"\", appendonly no): a restart forgets every claim, and copies arriving within the window after it get through; enable appendonly or RDB snapshots, or accept that", node))
		}
		// Any other error (a timeout): an outage, which the calls report.
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
	slices.Sort(out)
	var lines []string
	for kind, nodes := range refused {
		if len(nodes) > 0 {
			slices.Sort(nodes)
			lines = append(lines, fmt.Sprintf(uncheckedFormats[kind], strings.Join(nodes, ", "), refusal[kind]))
		}
	}
	return out, strings.Join(lines, "; ")
}

// uncheckedFormats say what a refusal of INFO, or of CONFIG GET save, left
// unchecked, of which masters, and what to check by hand.
var uncheckedFormats = [2]string{
	"could not check the maxmemory-policy and persistence of Redis %s: the user may not run INFO (%v); check that it has maxmemory-policy noeviction and appendonly on or RDB snapshots (save), or grant +info",
	"could not check whether Redis %s keeps claims across a restart: appendonly is off, and the user may not run CONFIG GET save (%v); check that it takes RDB snapshots (save) or turn appendonly on, or accept that a restart lets copies through within a window",
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
