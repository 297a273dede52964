package redistier

import (
	"context"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/redistest"
)

func TestCluster(t *testing.T) {
	cl := redistest.Cluster(t, 3)
	cc := cl.Client()
	defer cc.Close()
	runContractSuite(t, suiteTarget{endpoints: cl.Addrs(), store: clusterStore{cc}, cluster: true})

	t.Run("keys spread over every master", func(t *testing.T) {
		ctx := context.Background()
		tr := newTier(t, Options{Endpoints: cl.Addrs(), KeyPrefix: "spread:", Window: testWindow})
		ds := digests(t, "", 3000)
		claimed := claim(t, tr, testToken(), ds...)
		for i, ok := range claimed {
			if !ok {
				t.Fatalf("claimed[%d] = false", i)
			}
		}
		// Our slot computation is the server's.
		for _, d := range ds[:50] {
			key := tr.layout.digestKey(d)
			slot, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil || int(slot) != keySlot(key) {
				t.Fatalf("CLUSTER KEYSLOT %q = %d (%v), keySlot = %d", key, slot, err, keySlot(key))
			}
		}
		// The claim left one status key per tag: with the tags spread evenly
		// over the slots, each master serves 4 of the 12, and about a third
		// of the digests.
		digestKeys, statusKeys := 0, 0
		for _, n := range cl.Nodes {
			s := len(n.Client().Keys(ctx, "spread:{*}claim:*").Val())
			all := len(n.Client().Keys(ctx, "spread:*").Val())
			if s != clusterTags/3 {
				t.Errorf("master %s serves %d of %d tags, want %d", n.Addr(), s, clusterTags, clusterTags/3)
			}
			if all-s < len(ds)/4 || all-s > len(ds)/2 {
				t.Errorf("master %s holds %d of %d digest keys", n.Addr(), all-s, len(ds))
			}
			digestKeys += all - s
			statusKeys += s
		}
		if digestKeys != len(ds) || statusKeys != clusterTags {
			t.Errorf("keys under spread: = %d digest + %d status, want %d + %d", digestKeys, statusKeys, len(ds), clusterTags)
		}
	})
}
