package localcache

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// TestCacheMatchesReferenceUnderChurn drives a cache through random claims,
// releases and time steps, with digests that share fingerprints and home
// cells, and checks every answer against a plain model of the same promises:
// a fixed window, oldest evicted first, release by owner only, and a bound
// that counts a released key's slot until the oldest keys before it are gone
// (releases are rare: they follow failed deliveries).
func TestCacheMatchesReferenceUnderChurn(t *testing.T) {
	// 500 fits the first index size; 5000 makes the index grow thrice.
	for _, bound := range []int{500, 5000} {
		churn(t, bound, 0)
	}
}

// TestCacheSurvivesSequenceWrap runs the same churn with ring sequence
// numbers starting just before they wrap around 2^32, so stale and live
// index cells are told apart across the wrap.
func TestCacheSurvivesSequenceWrap(t *testing.T) {
	churn(t, 500, math.MaxUint32-2000)
}

func churn(t *testing.T, bound int, seqStart uint32) {
	window := int64(bound) * 3 // long enough for the bound to be reached
	rng := rand.New(rand.NewPCG(1, 2))
	c := New(bound, window)
	for i := range c.shards {
		c.shards[i].headSeq = seqStart
	}
	type entry struct {
		d       digest.Digest
		expires int64
		token   uint64
		dead    bool
	}
	var ring []*entry
	model := map[digest.Digest]*entry{}
	// 40% of digests collide on the low 32 bits of Hi (fingerprint and home).
	key := func() digest.Digest {
		k := rng.Uint64N(uint64(bound) * 6)
		hi := k * 0x9e3779b97f4a7c15
		if k%5 < 2 {
			hi = (k << 32) | 7
		}
		return digest.Digest{Hi: hi, Lo: k}
	}
	now := int64(0)
	for step := 0; step < 20_000; step++ {
		now += rng.Int64N(3)
		for len(ring) > 0 && (ring[0].dead || ring[0].expires <= now) {
			if !ring[0].dead {
				delete(model, ring[0].d)
			}
			ring = ring[1:]
		}
		d := key()
		token := uint64(rng.IntN(5) + 1)
		if rng.IntN(10) == 0 {
			got := c.Release(d, token)
			e, ok := model[d]
			want := ok && e.token == token
			if got != want {
				t.Fatalf("step %d: Release = %v, want %v", step, got, want)
			}
			if want {
				e.dead = true
				delete(model, d)
			}
			continue
		}
		res, _ := c.Claim(d, token, now)
		e, held := model[d]
		want := Claimed
		if held {
			want = Held
			if e.token == token {
				want = HeldBySelf
			}
		}
		if res != want {
			t.Fatalf("step %d: Claim = %v, want %v", step, res, want)
		}
		if res == Claimed {
			if len(ring) == bound {
				if !ring[0].dead {
					delete(model, ring[0].d)
				}
				ring = ring[1:]
			}
			e := &entry{d: d, expires: now + window, token: token}
			ring = append(ring, e)
			model[d] = e
		}
		if step%997 == 0 {
			if n := c.Len(now); n != len(model) {
				t.Fatalf("step %d: Len = %d, want %d", step, n, len(model))
			}
		}
	}
}
