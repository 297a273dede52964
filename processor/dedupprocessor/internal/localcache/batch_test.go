package localcache

import (
	"math/rand/v2"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// TestClaimBatchMatchesClaim: a batch claim answers exactly as claims made
// one by one in batch order, on a one-shard and a sharded cache, with
// in-batch copies, held keys and evictions.
func TestClaimBatchMatchesClaim(t *testing.T) {
	// The small cache also expires keys; the large one fills up and evicts.
	for _, tc := range []struct {
		bound  int
		window int64
	}{{300, 1000}, {100_000, 1 << 40}} {
		bound := tc.bound
		rng := rand.New(rand.NewPCG(3, 4))
		one, batched := New(bound, tc.window), New(bound, tc.window)
		now := int64(0)
		for round := range 200 {
			now += rng.Int64N(20)
			ds := make([]digest.Digest, 1+rng.IntN(1500))
			for i := range ds {
				k := rng.Uint64N(uint64(bound) * 3)
				ds[i] = digest.Digest{Hi: k * 0x9e3779b97f4a7c15, Lo: k}
			}
			token := uint64(round + 1)
			out := make([]Result, len(ds))
			batched.ClaimBatch(ds, token, now, out, nil)
			for i, d := range ds {
				want, _ := one.Claim(d, token, now)
				if out[i] != want {
					t.Fatalf("bound %d round %d item %d: ClaimBatch = %v, Claim = %v", bound, round, i, out[i], want)
				}
			}
			if a, b := one.Len(now), batched.Len(now); a != b {
				t.Fatalf("Len %d vs %d", a, b)
			}
		}
		if one.Evictions() != batched.Evictions() || one.Evictions() == 0 {
			t.Fatalf("bound %d: evictions %d vs %d (want equal and > 0)", bound, one.Evictions(), batched.Evictions())
		}
	}
}

// TestReleaseBatchMatchesRelease: ReleaseBatch releases exactly what Release
// would one by one: the token's own keys, once each, and nothing held by
// another token, committed, or absent.
func TestReleaseBatchMatchesRelease(t *testing.T) {
	for _, size := range []int{1000, 1 << 17} { // one shard, and 64
		c := New(size, 1000)
		c.Begin(5)
		c.Begin(9)
		var mine, theirs []digest.Digest
		for k := range uint64(300) {
			owner := uint64(5)
			if k%3 == 0 {
				owner = 9
			}
			if r, _ := c.Claim(d(k), owner, 0); r != Claimed {
				t.Fatalf("claim %d: %v", k, r)
			}
			if owner == 5 {
				mine = append(mine, d(k))
			} else {
				theirs = append(theirs, d(k))
			}
		}
		if r, _ := c.Claim(d(1000), noToken, 0); r != Claimed {
			t.Fatalf("claim 1000: %v", r)
		}
		ask := append(append(append([]digest.Digest{}, mine...), theirs...), d(1000), d(2000), mine[0])
		if got := c.ReleaseBatch(ask, 5); got != len(mine) {
			t.Errorf("size %d: released %d, want %d", size, got, len(mine))
		}
		if got := c.ReleaseBatch(ask, noToken); got != 0 {
			t.Errorf("size %d: released %d for no token, want 0", size, got)
		}
		out := make([]Result, len(ask))
		c.Begin(11)
		c.ClaimBatch(ask, 11, 1, out, nil)
		for i, k := range ask {
			want := Claimed // released, or never held
			switch {
			case i >= len(mine) && i < len(mine)+len(theirs):
				want = Pending // token 9's, still in flight
			case k == d(1000):
				want = Held
			case i == len(ask)-1:
				want = HeldBySelf // mine[0] again, claimed earlier in this batch
			}
			if out[i] != want {
				t.Errorf("size %d: key %v after ReleaseBatch: %v, want %v", size, k, out[i], want)
			}
		}
	}
}
