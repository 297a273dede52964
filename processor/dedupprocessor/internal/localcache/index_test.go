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
	// 500 fits the first index size; 5000 makes the index grow twice.
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
			got := c.release(d, token)
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

// TestIndexFindsOverflowedKeysAcrossGrowth claims keys that all share one
// fingerprint, so they overflow their home bucket into a chain, lets the
// index grow under them and the oldest of them leave the ring, and checks
// that exactly the keys still in the ring are found.
func TestIndexFindsOverflowedKeysAcrossGrowth(t *testing.T) {
	const bound, chain = 2000, 40
	c := New(bound, 1<<40)
	s := &c.shards[0]
	same := func(i int) digest.Digest { return digest.Digest{Hi: uint64(i)<<32 | 7, Lo: uint64(i)} }
	claims := 0
	claimedAt := make([]int, chain) // the chain keys' places in claim order
	claimOther := func() {
		if res, _ := c.Claim(hd(1<<40+uint64(claims)), 1, 0); res != Claimed {
			t.Fatalf("claim %d: %v", claims, res)
		}
		claims++
	}
	// The chain, spread over the first 1500 claims: the index grows twice
	// (at about 358 and 1433 keys) while it is being built.
	nb := s.nb
	for i := range chain {
		claimedAt[i] = claims
		if res, _ := c.Claim(same(i), 1, 0); res != Claimed {
			t.Fatalf("chain key %d: %v", i, res)
		}
		claims++
		for range 36 {
			claimOther()
		}
	}
	if s.nb <= 4*nb {
		t.Fatalf("the index grew from %d to only %d buckets", nb, s.nb)
	}
	check := func(when string) {
		t.Helper()
		for i := range chain {
			res, _ := c.Claim(same(i), 2, 0)
			inRing := claimedAt[i] >= claims-bound
			if res == Claimed {
				claims++ // it is in the ring again
			}
			if (res == Held) != inRing {
				t.Fatalf("%s: chain key %d claimed %d of %d: %v, want held = %v", when, i, claimedAt[i], claims, res, inRing)
			}
			if res == Claimed {
				c.release(same(i), 2)
			}
		}
	}
	check("after growth")
	// Let the first half of the chain leave the ring.
	for claims < claimedAt[chain/2]+bound {
		claimOther()
	}
	check("half evicted")
}

// TestMarkKeepsTheNewestOverflow: a bucket's mark names the newest key that
// passed it, whatever the order keys are placed in (growing the index
// places them in array order), since it must stay live as long as any of
// them does.
func TestMarkKeepsTheNewestOverflow(t *testing.T) {
	c := New(100, 1<<40)
	s := &c.shards[0]
	for k := range uint64(10) {
		c.Claim(hd(k), 1, 0)
	}
	var w [bucketWords]cell
	newer, older := s.headSeq+8, s.headSeq+2
	s.mark(&w, newer)
	s.mark(&w, older)
	if got := w[0].seq(); got != newer {
		t.Fatalf("mark = %d, want %d", got, newer)
	}
	// A stale mark is replaced by any live key.
	w[0] = makeCell(1, s.headSeq-1)
	s.mark(&w, older)
	if got := w[0].seq(); got != older {
		t.Fatalf("mark = %d, want %d", got, older)
	}
}
