package redistier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// The contract suite runs against a standalone server and a Cluster.
const (
	testLease  = 300 * time.Millisecond
	testWindow = time.Minute
	// pastLease is long enough for a testLease lease to have ended.
	pastLease = testLease + 150*time.Millisecond
)

type suiteTarget struct {
	endpoints []string
	store     store
	cluster   bool
}

// runContractSuite runs the claim, commit and release promises against
// target. The subtests run in parallel, each under its own key prefix, and
// afterwards every key on the server is checked against the layout.
func runContractSuite(t *testing.T, tg suiteTarget) {
	var mu sync.Mutex
	var prefixes []string
	newTierLease := func(t *testing.T, prefix string, lease time.Duration) *Tier {
		mu.Lock()
		prefixes = append(prefixes, prefix)
		mu.Unlock()
		return newTier(t, Options{
			Endpoints: tg.endpoints,
			KeyPrefix: prefix,
			Window:    testWindow,
			Lease:     lease,
			Timeout:   5 * time.Second, // generous: -race on 2 cores
		})
	}
	newTier := func(t *testing.T, prefix string) *Tier { return newTierLease(t, prefix, testLease) }
	ctx := context.Background()

	t.Run("group", func(t *testing.T) {
		t.Run("claim then duplicate", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "dup:")
			ds := digests(t, "", 3)
			wantClaimed(t, claim(t, tr, "tok-a", ds...), true, true, true)
			wantClaimed(t, claim(t, tr, "tok-b", ds...), false, false, false)
			fresh := digests(t, "fresh", 1)[0]
			wantClaimed(t, claim(t, tr, "tok-c", fresh, ds[1]), true, false)
			commit(t, tr, "tok-a", ds...)
			wantClaimed(t, claim(t, tr, "tok-d", ds...), false, false, false)
		})

		t.Run("distinct claims answer as claims do", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "distinct:")
			ds := digests(t, "", 300)
			got := make([]Answer, len(ds))
			for _, tok := range []string{"tok-a", "tok-p"} {
				part := ds[:100]
				if tok == "tok-p" {
					part = ds[100:200]
				}
				if err := tr.ClaimDistinct(ctx, tok, part, got); err != nil {
					t.Fatal(err)
				}
				for i, a := range got[:100] {
					if a != Claimed {
						t.Fatalf("%s: answer %d = %v", tok, i, a)
					}
				}
			}
			commit(t, tr, "tok-a", ds[:100]...)
			// 100 delivered, 100 pending under tok-p, 100 free.
			if err := tr.ClaimDistinct(ctx, "tok-b", ds, got); err != nil {
				t.Fatal(err)
			}
			want := make([]Answer, len(ds))
			if err := tr.ClaimAnswers(ctx, "tok-b", ds, want); err != nil { // tok-b's own: Claimed again
				t.Fatal(err)
			}
			for i, a := range got {
				w := []Answer{Held, PendingYounger, Claimed}[i/100]
				if a != w || want[i] != w {
					t.Fatalf("digest %d: ClaimDistinct %v, ClaimAnswers %v, want %v", i, a, want[i], w)
				}
			}
		})

		t.Run("pending and committed holders are told apart", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "answers:")
			ds := digests(t, "", 3)
			answers := func(token string) string {
				got := make([]Answer, len(ds))
				if err := tr.ClaimAnswers(ctx, token, ds, got); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(got)
			}
			want := func(answers ...Answer) string { return fmt.Sprint(answers) }
			wantClaimed(t, claim(t, tr, "tok-a", ds[0]), true)
			wantClaimed(t, claim(t, tr, "tok-b", ds[1]), true)
			commit(t, tr, "tok-a", ds[0])
			// ds[0] delivered, ds[1] still on its way, ds[2] free. Tokens
			// compare bytewise: tok-b is older than tok-c, and, not made by
			// NewToken, is taken as marked waiting: tok-c must yield.
			if got := answers("tok-c"); got != want(Held, PendingOlder, Claimed) {
				t.Fatalf("answers = %s", got)
			}
			// The same pending claims, seen by an older token.
			if got := answers("tok-0"); got != want(Held, PendingYounger, PendingYounger) {
				t.Fatalf("answers of an older token = %s", got)
			}
			// tok-b's delivery failed: its key is free for the retry.
			release(t, tr, "tok-b", ds[1])
			if got := answers("tok-d"); got != want(Held, Claimed, PendingOlder) {
				t.Fatalf("answers after release = %s", got)
			}
		})

		t.Run("an older holder is yielded to only while it waits", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "lazy:")
			// k1 and k2 in different groups (in a Cluster: on their own
			// script calls, which the post-claim mark must cover).
			ds := digests(t, "", 64)
			k1, k2 := apart(tr, ds)
			older, younger := NewToken(1), NewToken(2)
			answer := func(token string, d digest.Digest) Answer {
				got := make([]Answer, 2)
				if err := tr.Recheck(ctx, token, nil, []digest.Digest{d}, got, nil); err != nil {
					t.Fatal(err)
				}
				return got[0]
			}
			wantClaimed(t, claim(t, tr, older, k1), true)
			wantClaimed(t, claim(t, tr, younger, k2), true)
			// The older batch is on its way downstream, not waiting: the
			// younger may wait for it holding k2.
			if got := answer(younger, k1); got != Pending {
				t.Fatalf("younger meets an older batch that does not wait: %v, want Pending", got)
			}
			// The older batch waits for a still older one: no cycle can run
			// through it to a younger batch, which may go on holding.
			oldest, k3 := NewToken(0), digests(t, "oldest", 1)[0]
			wantClaimed(t, claim(t, tr, oldest, k3), true)
			if got := answer(older, k3); got != Pending {
				t.Fatalf("older meets the oldest: %v, want Pending", got)
			}
			if got := answer(younger, k1); got != Pending {
				t.Fatalf("younger meets an older batch waiting for an older one: %v, want Pending", got)
			}
			// The older batch now meets the younger's claim, in a call that
			// also holds k1 in another group: it waits, and says so there.
			got := make([]Answer, 2)
			if err := tr.ClaimAnswers(ctx, older, []digest.Digest{k1, k2}, got); err != nil {
				t.Fatal(err)
			}
			if got[0] != Claimed || got[1] != PendingYounger {
				t.Fatalf("older meets the younger: %v, want [Claimed PendingYounger]", got)
			}
			if got := answer(younger, k1); got != PendingOlder {
				t.Fatalf("younger meets an older batch that waits: %v, want PendingOlder", got)
			}
			// The younger yields; the older's next look wins k2.
			if err := tr.Yield(ctx, younger, []digest.Digest{k2}); err != nil {
				t.Fatal(err)
			}
			if got := answer(older, k2); got != Claimed {
				t.Fatalf("older after the yield: %v, want Claimed", got)
			}
			// A released claim leaves no waiting mark behind.
			release(t, tr, older, k1, k2)
			release(t, tr, oldest, k3)
			if n := len(tg.store.scanAll(t, "lazy:*")); n != 0 {
				t.Fatalf("%d keys left under lazy:, want 0", n)
			}
		})

		t.Run("a recheck that meets a younger claim marks the claims held from before", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "lazyheld:")
			k1, k2 := apart(tr, digests(t, "", 64))
			older, younger, youngest := NewToken(1), NewToken(2), NewToken(3)
			wantClaimed(t, claim(t, tr, older, k1), true)
			wantClaimed(t, claim(t, tr, younger, k2), true)
			// The older batch waits for k2 in a call of its own, holding k1
			// from an earlier one (in a Cluster, in another group).
			got := make([]Answer, 1)
			if err := tr.Recheck(ctx, older, []digest.Digest{k1}, []digest.Digest{k2}, got, nil); err != nil {
				t.Fatal(err)
			}
			if got[0] != PendingYounger {
				t.Fatalf("older meets the younger: %v, want PendingYounger", got[0])
			}
			if err := tr.ClaimAnswers(ctx, youngest, []digest.Digest{k1}, got); err != nil {
				t.Fatal(err)
			}
			if got[0] != PendingOlder {
				t.Fatalf("a younger batch meets k1 of the waiting older one: %v, want PendingOlder", got[0])
			}
			release(t, tr, older, k1)
			release(t, tr, younger, k2)
			release(t, tr, youngest, k1)
			if n := len(tg.store.scanAll(t, "lazyheld:*")); n != 0 {
				t.Fatalf("%d keys left under lazyheld:, want 0", n)
			}
		})

		t.Run("a recheck asks the holders it names, not the keys", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "holders:")
			ds := digests(t, "", 40) // over every group of a Cluster
			held, free := ds[:30], ds[30:]
			older, waiter := NewToken(1), NewToken(2)
			wantClaimed(t, claim(t, tr, older, held...), slices.Repeat([]bool{true}, len(held))...)

			answers, holders := make([]Answer, len(ds)), make([]string, len(ds))
			if err := tr.ClaimHolders(ctx, waiter, ds, answers, holders, true); err != nil {
				t.Fatal(err)
			}
			for i := range ds {
				wantA, wantH := Pending, older
				if i >= len(held) {
					wantA, wantH = Claimed, ""
				}
				if answers[i] != wantA || holders[i] != wantH {
					t.Fatalf("digest %d: %v held by %q, want %v held by %q", i, answers[i], holders[i], wantA, wantH)
				}
			}
			recheck := func(want Answer, wantHolder string) {
				t.Helper()
				got, hs := make([]Answer, len(held)), slices.Clone(holders[:len(held)])
				if err := tr.Recheck(ctx, waiter, free, held, got, hs); err != nil {
					t.Fatal(err)
				}
				for i := range held {
					if got[i] != want || hs[i] != wantHolder {
						t.Fatalf("recheck of digest %d: %v held by %q, want %v held by %q", i, got[i], hs[i], want, wantHolder)
					}
				}
			}
			// While the holder is pending, so are its digests, whatever
			// their keys hold: here one now names a claim that ended, which
			// a claim would take over.
			if err := tg.store.Set(ctx, tr.lay().digestKey(held[0]), "ended", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			recheck(Pending, older)
			// The holder meets the waiter's claims and waits for them: it is
			// marked in every group it holds, and the waiter must yield.
			got := make([]Answer, 1)
			if err := tr.Recheck(ctx, older, held, free[:1], got, nil); err != nil {
				t.Fatal(err)
			}
			if got[0] != PendingYounger {
				t.Fatalf("the holder meets the waiter: %v, want PendingYounger", got[0])
			}
			recheck(PendingOlder, older)
			// Committed: every digest it claimed is delivered, the one whose
			// key changed hands included.
			commit(t, tr, older, held...)
			recheck(Held, "")

			// A holder whose claim ended leaves its digests to be claimed.
			more := digests(t, "released", 5)
			gone := NewToken(3)
			wantClaimed(t, claim(t, tr, gone, more...), true, true, true, true, true)
			answers, holders = make([]Answer, len(more)), make([]string, len(more))
			if err := tr.ClaimHolders(ctx, waiter, more, answers, holders, true); err != nil {
				t.Fatal(err)
			}
			release(t, tr, gone, more...)
			if err := tr.Recheck(ctx, waiter, nil, more, answers, holders); err != nil {
				t.Fatal(err)
			}
			for i := range more {
				if answers[i] != Claimed || holders[i] != "" {
					t.Fatalf("digest %d after its holder's release: %v held by %q, want Claimed", i, answers[i], holders[i])
				}
			}
			release(t, tr, waiter, append(slices.Clone(ds), more...)...)
			release(t, tr, older, held...)
		})

		t.Run("holders pending", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "gate:")
			ds := digests(t, "", 24) // over every group of a Cluster
			h1, h2 := NewToken(1), NewToken(2)
			claim(t, tr, h1, ds[:12]...)
			claim(t, tr, h2, ds[12:]...)
			names := func(n1, n2 string) []string {
				hs := make([]string, len(ds))
				for i := range ds {
					hs[i] = n2
					if i < 12 {
						hs[i] = n1
					}
				}
				return hs
			}
			pending := func(hs []string) bool {
				t.Helper()
				p, err := tr.HoldersPending(ctx, ds, hs)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			if !pending(names(h1, h2)) || !pending(names("", h2)) || pending(names("", "")) {
				t.Fatal("pending holders not told from none")
			}
			commit(t, tr, h1, ds[:12]...)
			if pending(names(h1, "")) || !pending(names(h1, h2)) {
				t.Fatal("a committed holder is not pending; a pending one still is")
			}
			release(t, tr, h2, ds[12:]...)
			if pending(names(h1, h2)) {
				t.Fatal("a released holder is still pending")
			}
			// A holder is read in the group of the digest it held.
			if pending(names(NewToken(3), NewToken(4))) {
				t.Fatal("tokens that never claimed are pending")
			}
		})

		t.Run("in-call duplicates", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "incall:")
			ds := digests(t, "", 3)
			a, b, c := ds[0], ds[1], ds[2]
			wantClaimed(t, claim(t, tr, "tok-a", a, b, a, a, c, b), true, true, false, false, true, false)
			// Above the small-batch size, repeats are found with a map.
			many := digests(t, "many", 40)
			in := append(append([]digest.Digest{}, many...), many[:20]...)
			got := claim(t, tr, "tok-b", in...)
			for i, ok := range got {
				if ok != (i < 40) {
					t.Fatalf("claimed[%d] = %v, want %v", i, ok, i < 40)
				}
			}
		})

		t.Run("large batch spans several scripts", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "large:")
			ds := digests(t, "", 2500) // > maxKeysPerScript
			var every3rd []digest.Digest
			for i := 0; i < len(ds); i += 3 {
				every3rd = append(every3rd, ds[i])
			}
			for i, ok := range claim(t, tr, testToken(), every3rd...) {
				if !ok {
					t.Fatalf("claimed[%d] = false", i)
				}
			}
			// Repeats of the first digests come after the chunk boundary.
			in := append(append([]digest.Digest{}, ds...), ds[:5]...)
			got := claim(t, tr, testToken(), in...)
			for i, ok := range got {
				if want := i < len(ds) && i%3 != 0; ok != want {
					t.Fatalf("claimed[%d] = %v, want %v", i, ok, want)
				}
			}
		})

		t.Run("retry with the same token", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "retry:")
			ds := digests(t, "", 3)
			wantClaimed(t, claim(t, tr, "tok-a", ds[:2]...), true, true)
			// A retried round trip of the same claim keeps what it holds.
			wantClaimed(t, claim(t, tr, "tok-a", ds...), true, true, true)
			wantClaimed(t, claim(t, tr, "tok-b", ds...), false, false, false)
		})

		t.Run("race", func(t *testing.T) {
			t.Parallel()
			// Two tiers stand for two collectors, four goroutines each. The
			// claims stay pending: the lease must outlast the test, however
			// slow a busy machine makes it, or a key whose lease ended is
			// rightly claimed again.
			tiers := []*Tier{newTierLease(t, "race:", testWindow), newTierLease(t, "race:", testWindow)}
			ds := digests(t, "", 1000)
			const goroutines = 8
			wins := make([][]bool, goroutines)
			tokens := make([][]string, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					order := rng.Perm(len(ds))
					wins[g] = make([]bool, len(ds))
					tokens[g] = make([]string, len(ds))
					for lo := 0; lo < len(order); lo += 100 {
						idx := order[lo : lo+100]
						batch := make([]digest.Digest, len(idx))
						for k, i := range idx {
							batch[k] = ds[i]
						}
						tok := testToken()
						got := make([]bool, len(batch))
						if err := tiers[g%2].claimBools(ctx, tok, batch, got); err != nil {
							t.Errorf("Claim: %v", err)
							return
						}
						for k, i := range idx {
							wins[g][i], tokens[g][i] = got[k], tok
						}
					}
				}()
			}
			wg.Wait()
			total := 0
			for i, d := range ds {
				winners := 0
				var tok string
				for g := range goroutines {
					if wins[g][i] {
						winners++
						tok = tokens[g][i]
					}
				}
				total += winners
				if winners != 1 {
					t.Errorf("digest %d claimed by %d goroutines, want 1", i, winners)
					continue
				}
				if v, err := tg.store.Get(ctx, tiers[0].lay().digestKey(d)).Result(); err != nil || v != tok {
					t.Errorf("digest %d holds %q (%v), want the winner's token %q", i, v, err, tok)
				}
			}
			if total != len(ds) {
				t.Fatalf("claims won in total = %d, want %d", total, len(ds))
			}
		})

		t.Run("commit outlives the lease", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "commit:")
			ds := digests(t, "", 2)
			tok := testToken()
			wantClaimed(t, claim(t, tr, tok, ds...), true, true)
			key := tr.lay().digestKey(ds[0])
			status := tr.lay().statusKey(tr.lay().groupOf(ds[0]), tok)
			// The window runs from the claim; the pending status lives for
			// the lease only.
			wantPTTL(t, tg.store, key, testWindow-5*time.Second, testWindow)
			wantPTTL(t, tg.store, status, 1, testLease)
			wantValue(t, tg.store, status, "p")

			commit(t, tr, tok, ds...)
			wantPTTL(t, tg.store, status, testWindow-5*time.Second, testWindow)
			wantValue(t, tg.store, status, "c")
			commit(t, tr, tok, ds...) // idempotent

			time.Sleep(pastLease)
			wantClaimed(t, claim(t, tr, testToken(), ds...), false, false)
			wantValue(t, tg.store, key, tok)
		})

		t.Run("uncommitted claim ends with the lease", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "lease:")
			ds := digests(t, "", 1)
			tokA, tokB := testToken(), testToken()
			wantClaimed(t, claim(t, tr, tokA, ds...), true)
			wantClaimed(t, claim(t, tr, tokB, ds...), false) // pending, alive

			time.Sleep(pastLease)
			wantClaimed(t, claim(t, tr, tokB, ds...), true) // taken over
			key := tr.lay().digestKey(ds[0])
			wantValue(t, tg.store, key, tokB)
			wantPTTL(t, tg.store, key, testWindow-5*time.Second, testWindow) // a new window

			// A late commit or release of the first claim changes nothing.
			commit(t, tr, tokA, ds...)
			release(t, tr, tokA, ds...)
			wantValue(t, tg.store, key, tokB)
			wantClaimed(t, claim(t, tr, testToken(), ds...), false)
		})

		t.Run("release deletes only its own keys", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "release:")
			ds := digests(t, "", 3)
			tokA, tokB := testToken(), testToken()
			wantClaimed(t, claim(t, tr, tokA, ds...), true, true, true)
			time.Sleep(pastLease)
			wantClaimed(t, claim(t, tr, tokB, ds[1]), true)

			release(t, tr, tokA, ds...)
			wantMissing(t, tg.store, tr.lay().digestKey(ds[0]))
			wantValue(t, tg.store, tr.lay().digestKey(ds[1]), tokB)
			wantMissing(t, tg.store, tr.lay().digestKey(ds[2]))
			wantMissing(t, tg.store, tr.lay().statusKey(tr.lay().groupOf(ds[0]), tokA))
			release(t, tr, tokA, ds...) // idempotent

			wantClaimed(t, claim(t, tr, testToken(), ds...), true, false, true)
		})

		t.Run("release frees a pending claim at once", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "free:")
			ds := digests(t, "", 50)
			tok := testToken()
			got := claim(t, tr, tok, ds...)
			for i, ok := range got {
				if !ok {
					t.Fatalf("claimed[%d] = false", i)
				}
			}
			release(t, tr, tok, ds...)
			if keys := tg.store.scanAll(t, "free:*"); len(keys) != 0 {
				t.Fatalf("%d keys left after release: %q", len(keys), keys)
			}
			got = claim(t, tr, testToken(), ds...)
			for i, ok := range got {
				if !ok {
					t.Fatalf("after release, claimed[%d] = false", i)
				}
			}
		})

		t.Run("keys hold only prefix and digest", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "layout:")
			ds := digests(t, "", 200)
			tokA, tokB := testToken(), testToken()
			claim(t, tr, tokA, ds[:100]...)
			commit(t, tr, tokA, ds[:100]...)
			claim(t, tr, tokB, ds[100:]...)

			// Digest keys hold their token; each group a token claimed in
			// holds its status: committed for A, pending for B.
			want := map[string]string{}
			for i, d := range ds {
				tok, status := tokA, "c"
				if i >= 100 {
					tok, status = tokB, "p"
				}
				b := d.Bytes()
				group := tr.lay().groups[tr.lay().groupOf(d)].prefix
				want[group+string(b[:])] = tok
				want[group+"claim:"+tok] = status
			}
			got := tg.store.scanAll(t, "layout:*")
			if len(got) != len(want) {
				t.Errorf("%d keys under layout:, want %d", len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("key %q = %q, want %q", k, got[k], v)
				}
			}
		})
	})

	// Every key any subtest left must follow the layout: a known prefix, the
	// hash tag in a Cluster, then 16 digest bytes holding a 16-character token, or
	// "claim:" and a token holding "p" or "c", or the same + "w" holding "1".
	all := tg.store.scanAll(t, "*")
	if len(all) == 0 {
		t.Fatal("no keys on the server after the suite")
	}
	for k, v := range all {
		rest, ok := "", false
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				rest, ok = k[len(p):], true
				break
			}
		}
		if !ok {
			t.Errorf("key %q has no known prefix", k)
			continue
		}
		if tg.cluster {
			end := strings.IndexByte(rest, '}')
			if !strings.HasPrefix(rest, "{") || end < 2 || end > 4 {
				t.Errorf("key %q: bad hash tag", k)
				continue
			}
			rest = rest[end+1:]
		}
		switch {
		case strings.HasPrefix(rest, "claim:"):
			// A status key, or a waiting mark: the status key + "w".
			if v != "p" && v != "c" && (v != "1" || !strings.HasSuffix(rest, "w")) {
				t.Errorf("status key %q holds %q, want p or c (or a waiting mark: 1)", k, v)
			}
		case len(rest) == digest.Size:
			if len(v) == 0 {
				t.Errorf("digest key %q holds %q, want a token", k, v)
			}
		default:
			t.Errorf("key %q is neither a digest nor a status key", k)
		}
	}
}

func wantPTTL(t testing.TB, s store, key string, lo, hi time.Duration) {
	t.Helper()
	d, err := s.PTTL(context.Background(), key).Result()
	if err != nil || d < lo || d > hi {
		t.Fatalf("PTTL %q = %v (%v), want in [%v, %v]", key, d, err, lo, hi)
	}
}

func wantValue(t testing.TB, s store, key, want string) {
	t.Helper()
	v, err := s.Get(context.Background(), key).Result()
	if err != nil || v != want {
		t.Fatalf("GET %q = %q (%v), want %q", key, v, err, want)
	}
}

func wantMissing(t testing.TB, s store, key string) {
	t.Helper()
	n, err := s.Exists(context.Background(), key).Result()
	if err != nil || n != 0 {
		t.Fatalf("EXISTS %q = %d (%v), want 0", key, n, err)
	}
}
