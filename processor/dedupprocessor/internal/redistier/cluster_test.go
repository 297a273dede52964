package redistier

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
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
			key := hashOf(t, clusterStore{cc}, tr.lay(), d)
			slot, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil || int(slot) != keySlot(key) {
				t.Fatalf("CLUSTER KEYSLOT %q = %d (%v), keySlot = %d", key, slot, err, keySlot(key))
			}
		}
		// The claim left one status key per tag: with the tags spread evenly
		// over the slots, each master serves 4 of the 12, and about a third
		// of the digests.
		records, statusKeys := 0, 0
		for _, n := range cl.Nodes {
			kv := scanValues(t, n.Client(), "spread:*")
			s, r := 0, 0
			for k := range kv {
				switch {
				case strings.Contains(k, "}3:c:"):
					s++
				case isRecord(k):
					r++
				}
			}
			if s != defaultTags/3 {
				t.Errorf("master %s serves %d of %d tags, want %d", n.Addr(), s, defaultTags, defaultTags/3)
			}
			if r < len(ds)/4 || r > len(ds)/2 {
				t.Errorf("master %s holds %d of %d records", n.Addr(), r, len(ds))
			}
			records += r
			statusKeys += s
		}
		if records != len(ds) || statusKeys != defaultTags {
			t.Errorf("under spread: %d records + %d status keys, want %d + %d", records, statusKeys, len(ds), defaultTags)
		}
	})

	// A claim's groups are renewed each on its own: one whose status key
	// is gone (its master lost it) is reported lost once and no longer
	// renewed, while the claim's other groups stay renewed.
	t.Run("renewed group by group", func(t *testing.T) {
		ctx := context.Background()
		var obs observations
		const lease = 900 * time.Millisecond
		tr := newTier(t, Options{Endpoints: cl.Addrs(), KeyPrefix: "renew:", Window: testWindow, Lease: lease, Timeout: 300 * time.Millisecond, Observe: obs.observe})
		ds := digests(t, "", 200)
		tok := testToken()
		answers := make([]Answer, len(ds))
		if _, err := tr.Claim(ctx, tok, ds, answers, false); err != nil {
			t.Fatal(err)
		}
		gone := tr.lay().statusKey(tr.lay().groupOf(ds[0]), tok)
		if err := cc.Del(ctx, gone).Err(); err != nil {
			t.Fatal(err)
		}
		// Three renewal rounds: past the lease of a claim left unrenewed.
		testkit.WaitFor(t, "three renewal rounds", 10*time.Second, func() bool { return obs.count("renew/ok") >= 3 })
		if n := obs.count("renew/lost"); n != 1 {
			t.Fatalf("renewals lost = %d, want 1 (the group whose status key is gone)", n)
		}
		for _, d := range ds {
			g := tr.lay().groupOf(d)
			key := tr.lay().statusKey(g, tok)
			if want, got := map[bool]string{true: "", false: "p"}[key == gone], cc.Get(ctx, key).Val(); got != want {
				t.Fatalf("group %d's status key holds %q, want %q", g, got, want)
			}
		}
		commit(t, tr, tok, ds...)
	})
}

// servedBy returns, for each digest, the address of the master that serves
// its group's slot in cl's current topology.
func servedBy(t *testing.T, tr *Tier, cl *redistest.ClusterServers, ds []digest.Digest) []string {
	t.Helper()
	nodes := cl.Topology()
	out := make([]string, len(ds))
	for i, d := range ds {
		slot := keySlot(tr.lay().statusKey(tr.lay().groupOf(d), "x"))
		for _, n := range nodes {
			if n.Has("master") && !n.Has("fail") && n.Serves(slot) {
				out[i] = n.Addr
			}
		}
	}
	return out
}

// breakerOf returns the state of node's breaker, and whether it is known.
func breakerOf(tr *Tier, node string) (breaker.State, bool) {
	for _, nb := range tr.Breakers() {
		if nb.Node == node {
			return nb.State, true
		}
	}
	return 0, false
}

// TestClusterNodeHangs: a master stops answering (SIGSTOP). A claim spread
// over every master is answered for the groups of the two healthy masters,
// and the hung master's groups answer Unavailable: its timeout is its own,
// not stamped on the others' replies. After Failures timeouts its breaker
// opens: its groups then fail at once (skipped), the others are still
// answered, and the healthy masters' breakers stay closed.
func TestClusterNodeHangs(t *testing.T) {
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, NodeTimeout: time.Minute})
	var obs observations
	tr := newTier(t, Options{Endpoints: cl.Addrs()[:1], Window: testWindow, Timeout: 300 * time.Millisecond,
		Observe: obs.observe, Breaker: breaker.Config{Failures: 2, Cooldown: time.Minute}})
	ctx := context.Background()
	claimAll(t, tr, digests(t, "warm", 100))
	wantObserved(t, &obs, "claim/ok")

	hung, _ := cl.MasterOf(0)
	hung.Pause()
	defer hung.Resume()
	// The first claim asks the hung master again, with twice the time,
	// until its breaker opens; later claims skip it at once.
	for round, want := range [][]string{{"claim/timeout", "claim/timeout", "claim/skipped"}, {"claim/skipped"}, {"claim/skipped"}} {
		ds := digests(t, fmt.Sprint("round", round), 300)
		node := servedBy(t, tr, cl, ds)
		answers := make([]Answer, len(ds))
		_, err := tr.Claim(ctx, testToken(), ds, answers, false)
		if err == nil || !strings.Contains(err.Error(), "node "+hung.Addr()+": ") {
			t.Fatalf("round %d: claim: %v, want a failure of node %s", round, err, hung.Addr())
		}
		for i, a := range answers {
			if wantA := map[bool]Answer{true: Unavailable, false: Claimed}[node[i] == hung.Addr()]; a != wantA {
				t.Fatalf("round %d: digest %d on %s answered %v, want %v", round, i, node[i], a, wantA)
			}
		}
		wantObserved(t, &obs, want...)
	}
	if s, ok := breakerOf(tr, hung.Addr()); !ok || s != breaker.Open {
		t.Fatalf("hung master's breaker: %v (known %v), want open; all: %v", s, ok, tr.Breakers())
	}
	for _, nb := range tr.Breakers() {
		if nb.Node != hung.Addr() && nb.State != breaker.Closed {
			t.Fatalf("healthy master %s's breaker is %v", nb.Node, nb.State)
		}
	}
	if n := len(tr.Breakers()); n != 3 {
		t.Fatalf("%d breakers, want one per master: %v", n, tr.Breakers())
	}
}

// TestClusterMasterDies: a master is killed; its replica is promoted. Until
// then only the dead master's groups answer Unavailable (with
// cluster-require-full-coverage no, the other masters' slots stay served);
// once the replica serves them, every group is answered again, through the
// replica's own, closed, breaker, while the dead master's breaker is open.
func TestClusterMasterDies(t *testing.T) {
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: time.Second,
		Config: []string{"cluster-require-full-coverage no"}})
	tr := newTier(t, Options{Endpoints: cl.Addrs()[:1], Window: testWindow, Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	claimAll(t, tr, digests(t, "warm", 100))
	dead, replica := cl.MasterOf(0)
	var deadSlots redistest.ClusterNode
	for _, n := range cl.Topology() {
		if n.Addr == dead.Addr() {
			deadSlots = n
		}
	}
	dead.Kill()
	killed := time.Now()
	round := 0
	testkit.WaitFor(t, "every group answered after the kill", 30*time.Second, func() bool {
		round++
		ds := digests(t, fmt.Sprint("round", round), 120)
		answers := make([]Answer, len(ds))
		_, err := tr.Claim(ctx, testToken(), ds, answers, false)
		for i, a := range answers {
			if a != Unavailable {
				if a != Claimed {
					t.Fatalf("round %d: digest %d answered %v", round, i, a)
				}
				continue
			}
			// Only digests of the dead master's groups, whose slots it
			// served until the kill.
			g := tr.lay().groupOf(ds[i])
			if slot := keySlot(tr.lay().statusKey(g, "x")); !deadSlots.Serves(slot) {
				t.Fatalf("round %d: digest %d of slot %d (not the dead master's) unavailable: %v", round, i, slot, err)
			}
		}
		return err == nil
	})
	t.Logf("every group answered again %s after the kill", time.Since(killed).Round(10*time.Millisecond))
	// The node the harness asks may learn of the promotion a little after
	// the node go-redis asked.
	testkit.WaitFor(t, "slot 0 served by the promoted replica "+replica.Addr()+" after the tier answered", 10*time.Second, func() bool {
		for _, n := range cl.Topology() {
			if n.Addr == replica.Addr() && n.Has("master") && n.Serves(0) {
				return true
			}
		}
		return false
	})
	if s, ok := breakerOf(tr, replica.Addr()); !ok || s != breaker.Closed {
		t.Fatalf("the promoted replica's breaker: %v (known %v), want closed", s, ok)
	}
	if s, ok := breakerOf(tr, dead.Addr()); !ok || s != breaker.Open {
		t.Fatalf("the dead master's breaker: %v (known %v), want open", s, ok)
	}
}

// TestClusterSpreadsOverNineMasters: with as many tags as masters, or twice
// as many, every master of a 9-master Cluster holds an even share of the
// records (within 10%) and of the status keys, and serves each batch the
// same calls: two per tag it holds (the claim and the commit), however many
// masters there are.
func TestClusterSpreadsOverNineMasters(t *testing.T) {
	const masters, batches, batch = 9, 12, 1000
	cl := redistest.Cluster(t, masters)
	for _, tags := range []int{masters, 2 * masters} {
		t.Run(fmt.Sprintf("tags=%d", tags), func(t *testing.T) {
			ctx := context.Background()
			prefix := fmt.Sprintf("spread%d:", tags)
			tr := newTier(t, Options{Endpoints: cl.Addrs(), KeyPrefix: prefix, Window: testWindow, Lease: time.Minute, ClusterSlots: tags})
			// One batch loads the scripts on every master; the counts start after it.
			wantClaimed(t, claim(t, tr, testToken(), digests(t, prefix+"warm", 200)...), slices.Repeat([]bool{true}, 200)...)
			for _, n := range cl.Nodes {
				if err := n.Client().ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ds := digests(t, prefix, batches*batch)
			for b := range batches {
				part := ds[b*batch : (b+1)*batch]
				tok := testToken()
				wantClaimed(t, claim(t, tr, tok, part...), slices.Repeat([]bool{true}, batch)...)
				commit(t, tr, tok, part...)
			}
			warm := 200 // the warm-up's records
			for _, n := range cl.Nodes {
				records, status := 0, 0
				for k, v := range scanValues(t, n.Client(), prefix+"*") {
					switch {
					case strings.Contains(k, statusInfix):
						if strings.HasPrefix(v, "c") {
							status++
						}
					case isRecord(k):
						records++
					}
				}
				share := len(ds) / masters
				if lo, hi := share*9/10, share*11/10+warm/masters; records < lo || records > hi {
					t.Errorf("master %s holds %d records, want %d to %d (an even share of %d)", n.Addr(), records, lo, hi, len(ds))
				}
				if want := batches * tags / masters; status != want {
					t.Errorf("master %s holds %d committed status keys, want %d", n.Addr(), status, want)
				}
				if got, want := evalshaCalls(t, n.Client()), int64(2*batches*tags/masters); got != want {
					t.Errorf("master %s served %d script calls for %d batches, want %d", n.Addr(), got, batches, want)
				}
			}
		})
	}
}

// evalshaCalls is the server's EVALSHA calls since its last CONFIG RESETSTAT.
func evalshaCalls(t testing.TB, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
