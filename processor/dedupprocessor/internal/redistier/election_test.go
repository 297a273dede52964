package redistier

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// The election scripts run against a standalone server and a 3-master
// Cluster, each started for these tests alone (the claim suite checks that
// its servers hold only claim keys).

func TestElectionStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	runElectionSuite(t, []string{srv.Addr()}, standaloneStore{srv.Client()})
}

func TestElectionCluster(t *testing.T) {
	cl := redistest.Cluster(t, 3)
	cc := cl.Client()
	defer cc.Close()
	runElectionSuite(t, cl.Addrs(), clusterStore{cc})

	t.Run("elections spread over the masters, one slot each", func(t *testing.T) {
		ctx := context.Background()
		tr := newTier(t, Options{Endpoints: cl.Addrs(), KeyPrefix: "spread:", Window: testWindow, Timeout: 5 * time.Second})
		es := make([]Election, 60)
		for i := range es {
			es[i] = Election{Key: digests(t, "k", 60)[i], Replica: digests(t, "r", 1)[0]}
		}
		answers := make([]ElectionAnswer, len(es))
		if err := electAll(ctx, tr, testToken(), time.Minute, es, answers); err != nil {
			t.Fatal(err)
		}
		for i, a := range answers {
			if a.State != ElectionTaken {
				t.Fatalf("answer %d = %+v", i, a)
			}
			key := tr.electionKey(es[i].Key)
			slot, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil || int(slot) != keySlot(key) || keySlot(key) != keySlot("{"+es[i].Key.String()+"}") {
				t.Fatalf("slot of %q = %d (%v), want the slot of its hash tag %d", key, slot, err, keySlot(key))
			}
		}
		for _, n := range cl.Nodes {
			if got := len(n.Client().Keys(ctx, "spread:elect:*").Val()); got < 10 {
				t.Errorf("master %s holds %d of 60 elections", n.Addr(), got)
			}
		}
	})
}

const testFailover = 600 * time.Millisecond

func runElectionSuite(t *testing.T, endpoints []string, st store) {
	newT := func(t *testing.T, prefix string) *Tier {
		return newTier(t, Options{Endpoints: endpoints, KeyPrefix: prefix, Window: testWindow, Lease: testLease, Timeout: 5 * time.Second})
	}
	key := func(t *testing.T) digest.Digest { return digests(t, "election", 1)[0] }
	// The parallel subtests end within the group, before the caller closes
	// its clients.
	t.Run("group", func(t *testing.T) { runElectionCases(t, newT, key, st) })
}

func runElectionCases(t *testing.T, newT func(*testing.T, string) *Tier, key func(*testing.T) digest.Digest, st store) {
	ctx := context.Background()
	a, b := digest.Of([]byte("replica-a")), digest.Of([]byte("replica-b"))
	// elect1 takes an election that is not renewed, as if its collector
	// had died, so that tests see no renewals they did not ask for.
	elect1 := func(t *testing.T, tr *Tier, tok string, k, rep digest.Digest) ElectionAnswer {
		t.Helper()
		got := make([]ElectionAnswer, 1)
		if err := electAll(ctx, tr, tok, testFailover, []Election{{Key: k, Replica: rep}}, got); err != nil {
			t.Fatal(err)
		}
		tr.w.drop(tok)
		return got[0]
	}
	confirm1 := func(t *testing.T, tr *Tier, tok string, k, rep digest.Digest) ElectionAnswer {
		t.Helper()
		got := make([]ElectionAnswer, 1)
		if err := tr.CommitElected(ctx, tok, testFailover, []Election{{Key: k, Replica: rep}}, got); err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	wantAnswer := func(t *testing.T, got ElectionAnswer, state ElectionState, rep digest.Digest) {
		t.Helper()
		if got.State != state || got.Replica != rep {
			t.Fatalf("answer = %+v, want state %d replica %v", got, state, rep)
		}
	}

	t.Run("first candidate takes it, pending until confirmed", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "first:")
		k := key(t)
		tokA, tokB := testToken(), testToken()
		got := elect1(t, tr, tokA, k, a)
		if got.State != ElectionTaken || got.HasPrev {
			t.Fatalf("first elect = %+v", got)
		}
		// A retry of the same call still holds it.
		if got := elect1(t, tr, tokA, k, a); got.State != ElectionTaken {
			t.Fatalf("retried elect = %+v", got)
		}
		// Another token waits for the pending election.
		wantAnswer(t, elect1(t, tr, tokB, k, b), ElectionPending, a)
		// Pending: its key lives for the lease (bounds loose enough for a
		// loaded machine).
		wantPTTL(t, st, tr.electionKey(k), time.Millisecond, testLease)
		got = confirm1(t, tr, tokA, k, a)
		if got.State != ElectionLive || got.Replica != a || got.Remaining != testFailover {
			t.Fatalf("confirm = %+v", got)
		}
		// Committed: kept one failover timeout past its end, far longer
		// than a pending election's lease.
		wantPTTL(t, st, tr.electionKey(k), testLease, 2*testFailover)
		got = elect1(t, tr, tokB, k, b)
		if got.State != ElectionLive || got.Replica != a || got.Remaining <= 0 || got.Remaining > testFailover {
			t.Fatalf("b after a's confirm = %+v", got)
		}
	})

	t.Run("a released election is taken by the next replica", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "release:")
		k := key(t)
		tokA, tokB := testToken(), testToken()
		wantAnswer(t, elect1(t, tr, tokA, k, a), ElectionTaken, digest.Digest{})
		// Another token cannot release it.
		if err := tr.ReleaseElections(ctx, testToken(), testFailover, []Election{{Key: k}}); err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, elect1(t, tr, tokB, k, b), ElectionPending, a)
		if err := tr.ReleaseElections(ctx, tokA, testFailover, []Election{{Key: k}}); err != nil {
			t.Fatal(err)
		}
		wantMissing(t, st, tr.electionKey(k))
		wantAnswer(t, elect1(t, tr, tokB, k, b), ElectionTaken, digest.Digest{})
		// The released token's late confirm does not take b's election.
		wantAnswer(t, confirm1(t, tr, tokA, k, a), ElectionPending, b)
	})

	t.Run("failover after the timeout, and a released takeover restores the expired election", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "failover:")
		k := key(t)
		tokA := testToken()
		elect1(t, tr, tokA, k, a)
		confirm1(t, tr, tokA, k, a)
		tokB := testToken()
		wantAnswer(t, elect1(t, tr, tokB, k, b), ElectionLive, a)
		time.Sleep(testFailover + 50*time.Millisecond)
		got := elect1(t, tr, tokB, k, b)
		if got.State != ElectionTaken || !got.HasPrev || got.Replica != a {
			t.Fatalf("takeover = %+v, want taken with prev a", got)
		}
		if err := tr.ReleaseElections(ctx, tokB, testFailover, []Election{{Key: k}}); err != nil {
			t.Fatal(err)
		}
		// a's expired record is back: the next takeover is still a failover.
		tokC := testToken()
		got = elect1(t, tr, tokC, k, b)
		if got.State != ElectionTaken || !got.HasPrev || got.Replica != a {
			t.Fatalf("takeover after release = %+v, want taken with prev a", got)
		}
		wantAnswer(t, confirm1(t, tr, tokC, k, b), ElectionLive, b)
		wantAnswer(t, elect1(t, tr, testToken(), k, a), ElectionLive, b)
	})

	t.Run("the elected replica's confirm refreshes it", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "refresh:")
		k := key(t)
		tokA := testToken()
		elect1(t, tr, tokA, k, a)
		confirm1(t, tr, tokA, k, a)
		for range 3 {
			time.Sleep(testFailover / 2)
			// A later batch of a, delivered, refreshes it: it holds for a
			// whole failover timeout again.
			if got := confirm1(t, tr, testToken(), k, a); got.State != ElectionLive || got.Replica != a || got.Remaining != testFailover {
				t.Fatalf("a's confirm = %+v, want a refreshed for %s", got, testFailover)
			}
		}
		// 1.5 failover timeouts since it was taken: still a's.
		wantAnswer(t, elect1(t, tr, testToken(), k, b), ElectionLive, a)
		// b's delivered data does not take a live election.
		got := confirm1(t, tr, testToken(), k, b)
		if got.State != ElectionLive || got.Replica != a {
			t.Fatalf("b's confirm = %+v, want a's live election", got)
		}
	})

	t.Run("a delivered replica takes a free election committed", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "free:")
		k := key(t)
		wantAnswer(t, confirm1(t, tr, testToken(), k, b), ElectionLive, b)
		wantAnswer(t, elect1(t, tr, testToken(), k, a), ElectionLive, b)
	})

	t.Run("a pending election of a dead collector ends with its lease", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "lease:")
		k := key(t)
		elect1(t, tr, testToken(), k, a) // never confirmed nor released
		wantAnswer(t, elect1(t, tr, testToken(), k, b), ElectionPending, a)
		time.Sleep(pastLease)
		wantAnswer(t, elect1(t, tr, testToken(), k, b), ElectionTaken, digest.Digest{})
	})

	t.Run("racing candidates: exactly one takes it", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "race:")
		k := key(t)
		const racers = 16
		var wg sync.WaitGroup
		taken := make(chan digest.Digest, racers)
		toks := make([]string, racers)
		for i := range toks {
			toks[i] = testToken()
		}
		for i := range racers {
			rep := digest.Of([]byte{byte(i)})
			wg.Go(func() {
				got := make([]ElectionAnswer, 1)
				if err := electAll(ctx, tr, toks[i], testFailover, []Election{{Key: k, Replica: rep}}, got); err != nil {
					t.Error(err)
					return
				}
				if got[0].State == ElectionTaken {
					taken <- rep
				}
			})
		}
		wg.Wait()
		close(taken)
		var winners []digest.Digest
		for d := range taken {
			winners = append(winners, d)
		}
		if len(winners) != 1 {
			t.Fatalf("%d racers took the election, want 1", len(winners))
		}
	})

	t.Run("Redis holds digests and tokens, no label value", func(t *testing.T) {
		t.Parallel()
		tr := newT(t, "values:")
		k := key(t)
		tok := testToken()
		elect1(t, tr, tok, k, a)
		confirm1(t, tr, tok, k, a)
		got := st.scanAll(t, "values:*")
		delete(got, "values:shape/version")
		delete(got, "values:shape/tags")
		if len(got) != 1 {
			t.Fatalf("keys = %q, want the election key alone, beside the layout's shape", got)
		}
		v := got[tr.electionKey(k)]
		ab := a.Bytes()
		if len(v) < 34 || v[0] != 'c' || v[1:17] != string(ab[:]) || v[17:33] != tok || strings.Trim(v[33:], "0123456789") != "" {
			t.Fatalf("value = %q, want c, a's digest, the token, the time in ms", v)
		}
	})
}

func TestElectionNoScriptReload(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "reload:", Window: testWindow})
	ctx := context.Background()
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	k, rep := digest.Of([]byte("k")), digest.Of([]byte("r"))
	got := make([]ElectionAnswer, 1)
	tok := testToken()
	if err := electAll(ctx, tr, tok, time.Minute, []Election{{Key: k, Replica: rep}}, got); err != nil || got[0].State != ElectionTaken {
		t.Fatalf("elect after SCRIPT FLUSH = %+v, %v", got[0], err)
	}
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tr.CommitElected(ctx, tok, time.Minute, []Election{{Key: k, Replica: rep}}, got); err != nil || got[0].State != ElectionLive {
		t.Fatalf("commit after SCRIPT FLUSH = %+v, %v", got[0], err)
	}
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tr.ReleaseElections(ctx, tok, time.Minute, []Election{{Key: k}}); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
}

// TestElectionReleaseRetried: a release of a pending election that Redis
// fails is sent again once Redis answers, so the cluster is not stalled on
// every collector until the lease ends.
func TestElectionReleaseRetried(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := context.Background()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "retry:", Window: testWindow, Lease: time.Minute, Timeout: 200 * time.Millisecond})
	k, rep := digests(t, "k", 1)[0], digests(t, "r", 1)[0]
	tok := testToken()
	got := make([]ElectionAnswer, 1)
	if err := electAll(ctx, tr, tok, testFailover, []Election{{Key: k, Replica: rep}}, got); err != nil || got[0].State != ElectionTaken {
		t.Fatalf("Elect = %+v, %v", got[0], err)
	}
	// Scripts refused for a moment: the release fails without running.
	acl := func(rules ...any) {
		t.Helper()
		if err := srv.Client().Do(ctx, append([]any{"acl", "setuser", "default"}, rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	acl("-evalsha", "-eval")
	err := tr.ReleaseElections(ctx, tok, testFailover, []Election{{Key: k}})
	acl("+evalsha", "+eval")
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("ReleaseElections with scripts refused: %v, want NOPERM", err)
	}
	// The writer sends the release again: the election is free well before
	// its one-minute lease.
	testkit.WaitFor(t, "the election taken by another replica after its release failed", 10*time.Second, func() bool {
		err := electAll(ctx, tr, testToken(), testFailover, []Election{{Key: k, Replica: digests(t, "other", 1)[0]}}, got)
		return err == nil && got[0].State == ElectionTaken
	})
}
