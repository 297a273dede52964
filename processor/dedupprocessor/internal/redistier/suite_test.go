package redistier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// The contract suite runs against a standalone server and a Cluster.
const (
	testLease  = time.Second
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
	newTierObserved := func(t *testing.T, prefix string, lease time.Duration, obs *observations) *Tier {
		mu.Lock()
		prefixes = append(prefixes, prefix)
		mu.Unlock()
		return newTier(t, Options{
			Endpoints: tg.endpoints,
			KeyPrefix: prefix,
			Window:    testWindow,
			Lease:     lease,
			Timeout:   5 * time.Second, // generous: -race on 2 cores
			Observe:   obs.observe,
		})
	}
	newTierLease := func(t *testing.T, prefix string, lease time.Duration) *Tier {
		return newTierObserved(t, prefix, lease, new(observations))
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

		t.Run("answers by the holder's state", func(t *testing.T) {
			t.Parallel()
			tr := newTier(t, "answers:")
			ds := digests(t, "", 300)
			got := make([]Answer, len(ds))
			for _, tok := range []string{"tok-a", "tok-p"} {
				part := ds[:100]
				if tok == "tok-p" {
					part = ds[100:200]
				}
				if _, err := tr.Claim(ctx, tok, part, got, false); err != nil {
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
			if _, err := tr.Claim(ctx, "tok-b", ds, got, false); err != nil {
				t.Fatal(err)
			}
			again := make([]Answer, len(ds))
			if _, err := tr.Claim(ctx, "tok-b", ds, again, false); err != nil { // tok-b's own: Claimed again
				t.Fatal(err)
			}
			for i, a := range got {
				w := []Answer{Held, Pending, Claimed}[i/100]
				if a != w || again[i] != w {
					t.Fatalf("digest %d: %v, then %v, want %v", i, a, again[i], w)
				}
			}
			// tok-p's delivery failed: its keys are free for the retry.
			release(t, tr, "tok-p", ds[100:200]...)
			if _, err := tr.Claim(ctx, "tok-c", ds[:200], got, false); err != nil {
				t.Fatal(err)
			}
			for i, a := range got[:200] {
				if w := []Answer{Held, Claimed}[i/100]; a != w {
					t.Fatalf("after release, digest %d: %v, want %v", i, a, w)
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
			got := claim(t, tr, testToken(), ds...)
			for i, ok := range got {
				if want := i%3 != 0; ok != want {
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
				wantOwner(t, tg.store, tiers[0].lay(), d, tok)
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
			status := tr.lay().statusKey(tr.lay().groupOf(ds[0]), tok)
			// The record's hash outlives the window; the pending status
			// lives for the lease only.
			wantRecordPTTL(t, tg.store, tr.lay(), ds[0], testWindow, testLease)
			wantPTTL(t, tg.store, status, 1, testLease)
			wantValue(t, tg.store, status, "p")

			commit(t, tr, tok, ds...)
			wantPTTL(t, tg.store, status, testWindow-5*time.Second, testWindow)
			wantCommitted(t, tg.store, status)
			commit(t, tr, tok, ds...) // idempotent

			time.Sleep(pastLease)
			wantClaimed(t, claim(t, tr, testToken(), ds...), false, false)
			wantOwner(t, tg.store, tr.lay(), ds[0], tok)
		})

		t.Run("uncommitted claim ends with the lease", func(t *testing.T) {
			t.Parallel()
			obs := new(observations)
			tr := newTierObserved(t, "lease:", testLease, obs)
			ds := digests(t, "", 1)
			tokA, tokB := testToken(), testToken()
			wantClaimed(t, claim(t, tr, tokA, ds...), true)
			wantClaimed(t, claim(t, tr, tokB, ds...), false) // pending, alive

			time.Sleep(pastLease)
			wantClaimed(t, claim(t, tr, tokB, ds...), true) // taken over
			wantOwner(t, tg.store, tr.lay(), ds[0], tokB)

			// A late commit or release of the first claim changes nothing.
			// The commit is not reported lost: this collector stopped
			// renewing the claim, and a claim that ends under renewal is
			// the renewal's to report.
			obs.take()
			commit(t, tr, tokA, ds...)
			if got := obs.take(); fmt.Sprint(got) != "[commit/ok]" {
				t.Fatalf("observed %v, want the commit alone", got)
			}
			release(t, tr, tokA, ds...)
			wantOwner(t, tg.store, tr.lay(), ds[0], tokB)
			wantClaimed(t, claim(t, tr, testToken(), ds...), false)
		})

		t.Run("a commit reports lost only a claim that landed", func(t *testing.T) {
			t.Parallel()
			obs := new(observations)
			tr := newTierObserved(t, "landed:", testLease, obs)
			ds := digests(t, "", 1)
			tok := testToken()
			claimDownstream(t, tr, tok, ds...)
			// The claim ends behind the tier's back (evicted, say).
			if err := tg.store.Del(ctx, tr.lay().statusKey(tr.lay().groupOf(ds[0]), tok)).Err(); err != nil {
				t.Fatal(err)
			}
			obs.take()
			commit(t, tr, tok, ds...)
			if got := obs.take(); fmt.Sprint(got) != "[commit/ok commit/lost]" {
				t.Fatalf("observed %v, want the commit and its loss", got)
			}
			// A commit whose claim never answered (its records went out
			// unchecked, counted as such) finds no claim: nothing lost.
			commit(t, tr, testToken(), digests(t, "unanswered", 1)...)
			if got := obs.take(); fmt.Sprint(got) != "[commit/ok]" {
				t.Fatalf("observed %v, want the commit alone", got)
			}
		})

		t.Run("a claim downstream is renewed past its lease", func(t *testing.T) {
			t.Parallel()
			obs := new(observations)
			tr := newTierObserved(t, "renew:", testLease, obs)
			ds := digests(t, "", 2)
			tok := testToken()
			claimDownstream(t, tr, tok, ds...)
			time.Sleep(3 * testLease) // an export far longer than the lease
			wantClaimed(t, claim(t, tr, testToken(), ds...), false, false)
			status := tr.lay().statusKey(tr.lay().groupOf(ds[0]), tok)
			wantValue(t, tg.store, status, "p")
			commit(t, tr, tok, ds...)
			wantCommitted(t, tg.store, status)
			renewed := 0
			for _, o := range obs.take() {
				if o == "renew/lost" || o == "commit/lost" {
					t.Fatalf("observed %s", o)
				}
				if o == "renew/ok" {
					renewed++
				}
			}
			if renewed < 3 {
				t.Fatalf("renewed %d times in three leases, want at least 3", renewed)
			}
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
			wantOwner(t, tg.store, tr.lay(), ds[0], "")
			wantOwner(t, tg.store, tr.lay(), ds[1], tokB)
			wantOwner(t, tg.store, tr.lay(), ds[2], "")
			// The status key is the release's marker for the lease.
			wantValue(t, tg.store, tr.lay().statusKey(tr.lay().groupOf(ds[0]), tokA), "r")
			wantPTTL(t, tg.store, tr.lay().statusKey(tr.lay().groupOf(ds[0]), tokA), 0, testLease)
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
			// Only the release's markers are left, one per group, beside
			// the shapes.
			keys := tg.store.scanAll(t, "free:*")
			for k := range keys {
				if isShape(k) {
					delete(keys, k)
				}
			}
			groups := map[int]bool{}
			for _, d := range ds {
				g := tr.lay().groupOf(d)
				groups[g] = true
				if v := keys[tr.lay().statusKey(g, tok)]; v != "r" {
					t.Fatalf("group %d's status key holds %q after release, want r", g, v)
				}
			}
			if len(keys) != len(groups) {
				t.Fatalf("%d keys left after release: %q; want the %d markers only", len(keys), keys, len(groups))
			}
			got = claim(t, tr, testToken(), ds...)
			for i, ok := range got {
				if !ok {
					t.Fatalf("after release, claimed[%d] = false", i)
				}
			}
		})

		t.Run("keys hold only digests and claim ids", func(t *testing.T) {
			t.Parallel()
			// B's claims stay pending until the scan: a lease that outlasts
			// the test, however slow a busy machine makes it.
			tr := newTierLease(t, "layout:", testWindow)
			ds := digests(t, "", 200)
			tokA, tokB := testToken(), testToken()
			claim(t, tr, tokA, ds[:100]...)
			commit(t, tr, tokA, ds[:100]...)
			claim(t, tr, tokB, ds[100:]...)

			// Fields hold a stamp and their claim's id, each hash its roll
			// mark; each group a token claimed in holds its status:
			// committed for A, pending for B.
			want := map[string]string{}
			for i, d := range ds {
				tok, status := tokA, "c"
				if i >= 100 {
					tok, status = tokB, "p"
				}
				hash := hashOf(t, tg.store, tr.lay(), d)
				want[hash+"/"+string(appendField(nil, d))] = ClaimID(tok)
				want[hash+"/"] = "mark"
				want[tr.lay().statusKey(tr.lay().groupOf(d), tok)] = status
			}
			got := map[string]string{}
			stamps, marks := map[string]bool{}, map[string]bool{}
			for k, v := range tg.store.scanAll(t, "layout:*") {
				switch {
				case isShape(k):
					continue
				case strings.Contains(k, statusInfix): // a status key
					v = v[:1]
				case isRollMark(k):
					marks[v] = true
					v = "mark"
				case strings.Contains(k, "/"):
					stamps[v[:stampSize]] = true
					v = v[stampSize:]
				}
				got[k] = v
			}
			if len(stamps) > 2 || len(marks) > 2 {
				t.Errorf("stamps %v, roll marks %v: want the claims' two seconds at most", stamps, marks)
			}
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

	// Every key any subtest left must follow the layout: a known prefix and
	// the layout's shape, or the hash tag in a Cluster, the version, then a
	// record hash (its roll mark and its records, each a stamp and a claim
	// id), "c:" and a claim id holding "p", "c" and a second, or "r", or the
	// group's shape.
	all := tg.store.scanAll(t, "*")
	if len(all) == 0 {
		t.Fatal("no keys on the server after the suite")
	}
	version := strconv.Itoa(layoutVersion) + ":"
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
		if rest == "shape/version" || rest == "shape/tags" {
			if _, err := strconv.Atoi(v); err != nil {
				t.Errorf("shape %q holds %q, want a number", k, v)
			}
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
		name, field, isField := strings.Cut(rest, "/")
		switch {
		case strings.HasPrefix(rest, version+statusInfix):
			if v != "p" && v != "r" && (!strings.HasPrefix(v, "c") || len(v) != 11) {
				t.Errorf("status key %q holds %q, want p, c and a second, or r", k, v)
			}
		case name == version+"s" && isField && (field == "L" || field == "p" || field == "n"):
			if _, err := strconv.Atoi(v); err != nil {
				t.Errorf("group shape %q holds %q, want a number", k, v)
			}
		case strings.HasPrefix(name, version+"h") && isField && field == "":
			if _, err := strconv.ParseInt(v, 10, 64); err != nil || len(v) != 10 {
				t.Errorf("hash %q has the roll mark %q, want a second in 10 digits", k, v)
			}
		case strings.HasPrefix(name, version+"h") && isField && len(field) == fieldSize:
			if len(v) <= stampSize {
				t.Errorf("record %q holds %q, want a stamp and a claim id", k, v)
			}
		default:
			t.Errorf("key %q is neither a record hash, a status key nor a shape", k)
		}
	}
}

// isShape reports whether k, from scanValues, is a field of the layout's or a
// group's shape.
func isShape(k string) bool {
	name, _, _ := strings.Cut(k, "/")
	return strings.HasSuffix(name, "shape") || strings.HasSuffix(name, strconv.Itoa(layoutVersion)+":s")
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
