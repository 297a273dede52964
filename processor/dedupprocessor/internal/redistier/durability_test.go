package redistier

import (
	"context"
	"fmt"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestDurability: a server that may evict or forget claims is reported,
// naming the fix; one that keeps them is not; one whose user may not run
// CONFIG GET (the fleet's ACL) is still checked for eviction (INFO); what a
// refusal left unchecked is said, naming the server.
func TestDurability(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(
		"user fleet-a on >s3cret resetkeys ~fleet-a:* +@all -config",
		"user no-info on >s3cret resetkeys ~fleet-a:* +@all -info"))
	ctx := context.Background()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, Window: testWindow})
	limited := newTier(t, Options{Endpoints: []string{srv.Addr()}, Username: "fleet-a", Password: "s3cret", KeyPrefix: "fleet-a:", Window: testWindow})
	noInfo := newTier(t, Options{Endpoints: []string{srv.Addr()}, Username: "no-info", Password: "s3cret", KeyPrefix: "fleet-a:", Window: testWindow})
	set := func(k, v string) {
		t.Helper()
		if err := srv.Client().ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	evicts := fmt.Sprintf(`Redis %s has maxmemory-policy "volatile-ttl": once it reaches maxmemory it evicts claims, and copies of delivered records get through; set maxmemory-policy noeviction and give it the memory the window needs`, srv.Addr())
	forgets := fmt.Sprintf(`Redis %s keeps nothing on disk (save "", appendonly no): a restart forgets every claim, and copies arriving within the window after it get through; enable appendonly or RDB snapshots, or accept that`, srv.Addr())
	unknown := fmt.Sprintf(`could not check whether Redis %s keeps claims across a restart: appendonly is off, and the user may not run CONFIG GET save (NOPERM this user has no permissions to run the 'config|get' command); check that it takes RDB snapshots (save) or turn appendonly on, or accept that a restart lets copies through within a window`, srv.Addr())
	blind := fmt.Sprintf(`could not check the maxmemory-policy and persistence of Redis %s: the user may not run INFO (NOPERM this user has no permissions to run the 'info' command); check that it has maxmemory-policy noeviction and appendonly on or RDB snapshots (save), or grant +info`, srv.Addr())
	for _, tc := range []struct {
		name                 string
		policy, save, aof    string
		admin, limited       []string
		adminNote, limitNote string
	}{
		{"evicts, nothing on disk", "volatile-ttl", "", "no", []string{evicts, forgets}, []string{evicts}, "", unknown},
		{"noeviction, snapshots", "noeviction", "3600 1", "no", nil, nil, "", unknown},
		{"noeviction, append-only file", "noeviction", "", "yes", nil, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set("maxmemory-policy", tc.policy)
			set("save", tc.save)
			set("appendonly", tc.aof)
			for _, c := range []struct {
				tier *Tier
				want []string
				note string
			}{{tr, tc.admin, tc.adminNote}, {limited, tc.limited, tc.limitNote}, {noInfo, nil, blind}} {
				got, note := c.tier.Durability(ctx)
				if fmt.Sprint(got) != fmt.Sprint(c.want) || note != c.note {
					t.Errorf("Durability = %q, %q\nwant %q, %q", got, note, c.want, c.note)
				}
			}
		})
	}
}
