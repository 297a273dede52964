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
			batched.ClaimBatch(ds, token, now, out)
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
