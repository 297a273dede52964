package localcache

import (
	"sync"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// batchScratch is the per-call working memory of ClaimBatch.
type batchScratch struct {
	order  []int32 // positions of ds, grouped by shard, batch order kept
	starts []int32 // where each shard's group starts in order
}

var scratchPool = sync.Pool{New: func() any { return new(batchScratch) }}

// ClaimBatch claims every digest of ds for token, as Claim does one by one
// in order, and writes each result to out[i]. It takes each shard's lock
// once for all of that shard's digests, and before claiming it reads the
// index cells those claims (and the evictions they cause) will need, so the
// CPU fetches them from memory in parallel rather than one miss at a time.
// out must have at least len(ds) elements.
func (c *Cache) ClaimBatch(ds []digest.Digest, token uint64, now int64, out []Result) {
	c.eachShard(ds, func(s *shard, group []int32) {
		s.expire(now)
		s.prefetch(ds, group)
		locked := false
		for _, i := range group {
			var owner uint64
			out[i], owner = s.claim(ds[i], token, now, c.window)
			if out[i] == Held {
				out[i], locked = c.heldStateLocked(owner, locked)
			}
		}
		if locked {
			c.flights.mu.Unlock()
		}
	})
}

// eachShard calls fn once for each shard holding digests of ds, under that
// shard's lock, with the positions of those digests in ds, in their order.
func (c *Cache) eachShard(ds []digest.Digest, fn func(s *shard, group []int32)) {
	sc := scratchPool.Get().(*batchScratch)
	defer scratchPool.Put(sc)
	order, starts := c.byShard(ds, sc)
	begin := int32(0)
	for k := range c.shards {
		end := starts[k]
		if end == begin {
			continue
		}
		s := &c.shards[k]
		s.mu.Lock()
		fn(s, order[begin:end])
		s.mu.Unlock()
		begin = end
	}
}

// byShard groups the positions of ds by shard, keeping their order within
// each: shard k's are order[starts[k-1]:starts[k]] (from 0 for k = 0).
func (c *Cache) byShard(ds []digest.Digest, sc *batchScratch) (order, starts []int32) {
	n := len(c.shards)
	if cap(sc.starts) < n+1 {
		sc.starts = make([]int32, n+1)
	}
	starts = sc.starts[:n+1]
	clear(starts)
	for _, d := range ds {
		starts[(d.Lo&c.mask)+1]++
	}
	for i := 1; i <= n; i++ {
		starts[i] += starts[i-1]
	}
	if cap(sc.order) < len(ds) {
		sc.order = make([]int32, len(ds))
	}
	order = sc.order[:len(ds)]
	// Counting sort; starts[k] walks from group k's start to group k+1's.
	for i, d := range ds {
		k := d.Lo & c.mask
		order[starts[k]] = int32(i)
		starts[k]++
	}
	return order, starts
}

// ReleaseBatch releases every digest of ds that token still holds, as
// Release does one by one, taking each shard's lock once for all of that
// shard's digests and reading their index cells ahead as ClaimBatch does. It
// returns how many it released.
func (c *Cache) ReleaseBatch(ds []digest.Digest, token uint64) int {
	if token == noToken || len(ds) == 0 {
		return 0
	}
	released := 0
	c.eachShard(ds, func(s *shard, group []int32) {
		s.prefetch(ds, group)
		for _, i := range group {
			if s.release(ds[i], token) {
				released++
			}
		}
	})
	return released
}

// heldStateLocked is heldState for ClaimBatch, which takes c.flights.mu at
// the first key held by a token (committed keys held by no token need no
// look) and keeps it until the shard is done: locked says whether it is
// taken, and is returned updated.
func (c *Cache) heldStateLocked(owner uint64, locked bool) (Result, bool) {
	if owner == noToken {
		return Held, locked
	}
	if !locked {
		c.flights.mu.Lock()
	}
	return c.heldState(owner), true
}

// prefetch reads the index cells the coming claims will probe first. The
// values are discarded; the point is that these independent loads overlap.
// (Evicting the oldest keys needs no index cell: see cell.)
func (s *shard) prefetch(ds []digest.Digest, group []int32) {
	x := &s.index
	var acc cell
	for _, i := range group {
		acc ^= x.words[x.home(fingerprint(ds[i]))*bucketWords]
	}
	s.sink = acc
}

// claim is Claim under the shard's lock, with expiry already done. It
// returns the token that holds d.
func (s *shard) claim(d digest.Digest, token uint64, now, window int64) (Result, uint64) {
	pos, ci, ok := s.index.lookup(d, s)
	if ok {
		sl := s.at(pos)
		switch {
		case sl.expires <= now && !s.flights.holds(sl.token):
			// Only an inserted key, or one that outlived its window
			// pending, can expire behind a later one; it is gone.
			s.forget(sl, ci)
		case token != noToken && sl.token == token:
			return HeldBySelf, token
		default:
			return Held, sl.token
		}
	}
	s.push(d, now+window, token, now)
	return Claimed, token
}
