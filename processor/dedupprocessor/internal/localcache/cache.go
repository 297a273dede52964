// Package localcache is the local tier: a bounded, sharded set of digests,
// each remembered for a fixed window from its first claim.
//
// Every key lives exactly one window, so claim order is expiry order: each
// shard keeps its keys in a ring in claim order, whose head is both the next
// key to expire and the oldest, making expiry and evict-oldest-first the
// same O(1) pop. Keys are found through an index of cells (see cell) that
// eviction never touches. Neither the ring nor the index holds pointers:
// they are mapped outside the Go heap (offheap.go).
package localcache

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Result is the outcome of a Claim.
type Result uint8

const (
	// Claimed: the digest was not held; it now is, by the caller's token.
	Claimed Result = iota
	// HeldBySelf: the digest is held by the caller's own token.
	HeldBySelf
	// Held: the digest is held by a committed claim: its record was delivered.
	Held
	// Pending: held by a token in flight (see Begin): its record is
	// downstream, may be released.
	Pending
)

// noToken marks an entry no claim owns (restored, or disowned): committed,
// and never released.
const noToken uint64 = 0

// Cache is safe for concurrent use; no lock is held across shards. A key is
// held by the token that claimed it: pending while that token is in flight
// (between Begin and End), committed after.
type Cache struct {
	shards  []shard
	mask    uint64
	window  int64
	flights flights
	arena   *arena
	moving  moving
}

type shard struct {
	mu      sync.Mutex
	ring    []slot // mapped whole at New; its pages are used as keys arrive
	size    int    // ring capacity of this shard
	head    int    // position of the oldest slot
	headSeq uint32 // its sequence number: keys are numbered as pushed
	used    int    // slots between head and tail, released ones included
	ready   int    // slots whose pages are backed (see push)
	live    int    // slots holding a key
	evicted int64
	index   []cell // mapped whole at New; its first nb buckets are in use (see cell)
	nb      uint64
	maxNb   uint64   // buckets at full size
	sink    cell     // where prefetch leaves its reads
	flights *flights // the cache's
	moving  *moving  // the cache's
	_       [40]byte // keep shards on separate cache lines (192 bytes)
}

type slot struct {
	d       digest.Digest
	expires int64 // unix nanoseconds; 0 marks a released slot
	token   uint64
}

// New returns a cache of at most maxEntries (>= 1) digests, each kept window
// ns from its claim.
func New(maxEntries int, windowNanos int64) *Cache {
	// Small caches keep one shard, so eviction is exactly oldest first.
	n := 1
	if maxEntries >= 64*1024 {
		n = 64
	}
	c := &Cache{shards: make([]shard, n), mask: uint64(n - 1), window: windowNanos,
		flights: flights{tokens: map[uint64]struct{}{}}, arena: new(arena)}
	runtime.AddCleanup(c, func(a *arena) { a.freeAll() }, c.arena)
	for i := range c.shards {
		s := &c.shards[i]
		s.size = maxEntries / n
		if i < maxEntries%n {
			s.size++
		}
		s.flights, s.moving = &c.flights, &c.moving
		s.ring = alloc[slot](c.arena, s.size)
		s.maxNb = bucketsFor(s.size)
		s.index = alloc[cell](c.arena, int(s.maxNb*bucketWords))
		s.nb = min(minBuckets, s.maxNb)
	}
	return c
}

// flights is the tokens in flight. Its lock is taken inside a shard's or
// alone, never around one.
type flights struct {
	mu     sync.Mutex
	tokens map[uint64]struct{}
	oldest atomic.Uint64 // the smallest token in flight, 0 if none: read without the lock
}

// Begin puts token (unique, not noToken) in flight: the keys it claims are
// pending until End.
func (c *Cache) Begin(token uint64) {
	c.flights.mu.Lock()
	c.flights.tokens[token] = struct{}{}
	if o := c.flights.oldest.Load(); o == 0 || token < o {
		c.flights.oldest.Store(token)
	}
	c.flights.mu.Unlock()
}

// End takes token out of flight, committing its keys: release them first if
// not delivered.
func (c *Cache) End(token uint64) {
	c.flights.mu.Lock()
	delete(c.flights.tokens, token)
	if token == c.flights.oldest.Load() {
		oldest := uint64(0)
		for t := range c.flights.tokens {
			if oldest == 0 || t < oldest {
				oldest = t
			}
		}
		c.flights.oldest.Store(oldest)
	}
	c.flights.mu.Unlock()
}

// holds reports whether token is in flight. The caller holds the lock of
// the shard where token holds a key, so a holder not in flight committed.
func (f *flights) holds(token uint64) bool {
	if o := f.oldest.Load(); token == noToken || o == 0 || token < o {
		return false
	}
	f.mu.Lock()
	_, ok := f.tokens[token]
	f.mu.Unlock()
	return ok
}

// ClaimBatch claims every digest of ds for token, in order, into out[i], taking
// each shard's lock once and prefetching the cells so misses overlap. With
// claimed (nil: not wanted), a digest that answers Held sets claimed[i] to
// when its holder claimed it (unix nanoseconds): its copy's age is now minus
// that.
func (c *Cache) ClaimBatch(ds []digest.Digest, token uint64, now int64, out []Result, claimed []int64) {
	c.eachShard(ds, func(s *shard, group []int32) {
		s.expire(now)
		s.prefetch(ds, group)
		for _, i := range group {
			var expires int64
			out[i], _, expires = s.claim(ds[i], token, now, c.window)
			if claimed != nil && out[i] == Held {
				claimed[i] = expires - c.window
			}
		}
	})
}

type batchScratch struct {
	order  []int32 // positions of ds, grouped by shard, batch order kept
	starts []int32 // where each shard's group ends in order
}

var scratchPool = sync.Pool{New: func() any { return new(batchScratch) }}

// eachShard calls fn, under its lock, for each shard with digests of ds, with
// their positions.
func (c *Cache) eachShard(ds []digest.Digest, fn func(s *shard, group []int32)) {
	sc := scratchPool.Get().(*batchScratch)
	defer scratchPool.Put(sc)
	// A counting sort: starts[k+1] counts shard k's digests, then is where
	// its group starts, then, once filled, where it ends.
	n := len(c.shards)
	sc.starts = slices.Grow(sc.starts[:0], n+1)[:n+1]
	sc.order = slices.Grow(sc.order[:0], len(ds))[:len(ds)]
	starts, order := sc.starts, sc.order
	clear(starts)
	for _, d := range ds {
		starts[(d.Lo&c.mask)+1]++
	}
	for i := 1; i <= n; i++ {
		starts[i] += starts[i-1]
	}
	for i, d := range ds {
		k := d.Lo & c.mask
		order[starts[k]] = int32(i)
		starts[k]++
	}
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

// expire pops expired keys and released slots off the ring's head. A key whose
// batch is in flight outlives its window, so copies await the export.
func (s *shard) expire(now int64) {
	for s.used > 0 {
		sl := &s.ring[s.head]
		if sl.expires > now || sl.expires != 0 && s.flights.holds(sl.token) {
			return
		}
		s.pop()
	}
}

// prefetch reads the index cells the coming claims probe first, so these
// independent loads overlap.
func (s *shard) prefetch(ds []digest.Digest, group []int32) {
	var acc cell
	for _, i := range group {
		acc ^= s.index[s.home(fingerprint(ds[i]))*bucketWords]
	}
	s.sink = acc
}

// claim records d for token unless held, and returns the holder and its
// key's expiry (a window after its claim); the shard is locked and expired.
func (s *shard) claim(d digest.Digest, token uint64, now, window int64) (Result, uint64, int64) {
	if sl, ci := s.lookup(d); sl != nil {
		switch {
		case sl.expires <= now && !s.flights.holds(sl.token):
			// Only an inserted key, or one that outlived its window
			// pending, can expire behind a later one; it is gone.
			s.forget(sl, ci)
		case token != noToken && sl.token == token:
			return HeldBySelf, token, sl.expires
		case s.flights.holds(sl.token):
			return Pending, sl.token, sl.expires
		default:
			return Held, sl.token, sl.expires
		}
	}
	s.push(d, now+window, token, now)
	return Claimed, token, now + window
}

// lookup returns d's slot and its cell's index word, or nil, probing on while
// a mark says it overflowed.
func (s *shard) lookup(d digest.Digest) (*slot, uint64) {
	fp := fingerprint(d)
	b := s.home(fp)
	for range s.nb {
		w := s.bucket(b)
		for j := 1; j < bucketWords; j++ {
			if w[j].fingerprint() != fp {
				continue
			}
			if pos, live := s.posOf(w[j].seq()); live {
				if sl := &s.ring[pos]; sl.d == d && sl.expires != 0 {
					return sl, b*bucketWords + uint64(j)
				}
			}
		}
		if !s.current(w[0]) {
			break
		}
		b = s.next(b)
	}
	return nil, 0
}

// push appends and indexes a key, evicting the head of a full ring. A key from
// Insert may expire before keys ahead of it: claim treats it as absent.
func (s *shard) push(d digest.Digest, expires int64, token uint64, now int64) {
	if s.used == s.size {
		if s.ring[s.head].expires > now {
			s.evicted++
		}
		s.pop()
	}
	pos := s.at(s.used)
	if pos >= s.ready { // the first pass over the ring: back the next 64 KiB
		s.ready = min(pos+64<<10/int(unsafe.Sizeof(slot{})), s.size)
		populate(s.ring[pos:s.ready])
	}
	s.ring[pos] = slot{d: d, expires: expires, token: token}
	if s.nb < s.maxNb && (s.live+1)*5/2 > int(s.nb)*bucketCells {
		s.grow()
	}
	s.place(makeCell(fingerprint(d), s.headSeq+uint32(s.used)))
	s.used++
	s.live++
}

// pop drops the head of the ring; its cell turns stale with no index work.
func (s *shard) pop() {
	if s.ring[s.head].expires != 0 {
		s.live--
	}
	s.headSeq++
	s.head = s.at(1)
	s.used--
}

// forget removes a held key (cell ci), releasing its slot; no probe ends at
// an empty cell: none moves.
func (s *shard) forget(sl *slot, ci uint64) {
	s.index[ci] = 0
	sl.expires = 0
	s.live--
}

// cell is one index entry: the fingerprint (32 bits of the digest, low bit
// set, so no entry is 0, the empty cell), compared before the ring slot is
// read, then the key's sequence number in its shard's ring.
//
// An evicted or expired key's cell turns stale, without a write, once the
// ring's head passes its sequence number: evicting costs no index access.
// Sequence numbers compare modulo 2^32 against fewer than 2^32 keys, so a
// live cell is always seen live; a stale one that looks live is harmless,
// as a lookup compares the whole digest.
//
// Each bucket is one cache line: a mark (word 0) and 7 cells. A key whose
// home bucket is full goes on to the next, and the full bucket's mark
// records its sequence number; keys leave in the order they came, so a mark
// turns stale with the newest key that overflowed. The index is mapped at
// full size (2.5 cells per ring slot) but uses a growing prefix, so a cache
// holding few keys touches few pages.
type cell uint64

func (c cell) seq() uint32         { return uint32(c) }
func (c cell) fingerprint() uint32 { return uint32(c >> 32) }

func makeCell(fp, seq uint32) cell { return cell(uint64(fp)<<32 | uint64(seq)) }

// fingerprint, d's bits the index keeps, alone picks the home bucket: growing
// never reads the ring.
func fingerprint(d digest.Digest) uint32 { return uint32(d.Hi) | 1 }

const (
	bucketWords = 8
	bucketCells = bucketWords - 1
	minBuckets  = 128
)

var pageCells = os.Getpagesize() / 8 // a cell is 8 bytes

// bucketsFor is the number of buckets whose cells hold n live keys at 40%.
func bucketsFor(n int) uint64 {
	return uint64((5*max(n, 1)/2 + bucketCells - 1) / bucketCells)
}

// home is fp's bucket: a multiply-shift maps onto any number of buckets.
func (s *shard) home(fp uint32) uint64 { return uint64(fp) * s.nb >> 32 }

func (s *shard) bucket(b uint64) *[bucketWords]cell {
	return (*[bucketWords]cell)(s.index[b*bucketWords : (b+1)*bucketWords])
}

func (s *shard) next(b uint64) uint64 {
	if b++; b == s.nb {
		return 0
	}
	return b
}

// posOf returns the ring position of the key numbered seq, or false if it
// left (a stale cell).
func (s *shard) posOf(seq uint32) (int, bool) {
	off := seq - s.headSeq
	if off >= uint32(s.used) {
		return 0, false
	}
	return s.at(int(off)), true
}

// at is the ring position off (< size) slots past the head.
func (s *shard) at(off int) int {
	if pos := s.head + off; pos < s.size {
		return pos
	}
	return s.head + off - s.size
}

// current reports whether c, a cell or a mark, names a key still in the ring:
// it is neither empty nor stale. A current mark says a live key overflowed.
func (s *shard) current(c cell) bool {
	if c == 0 {
		return false // empty: most cells place meets
	}
	_, live := s.posOf(c.seq())
	return live
}

// place puts c in the first empty or stale cell of its probe (40% full at
// most), marking full buckets.
func (s *shard) place(c cell) {
	b := s.home(c.fingerprint())
	for {
		w := s.bucket(b)
		for j := 1; j < bucketWords; j++ {
			if !s.current(w[j]) {
				w[j] = c
				return
			}
		}
		s.mark(w, c.seq())
		b = s.next(b)
	}
}

// mark records that key seq passed the full bucket w, unless it names a later
// live key already.
func (s *shard) mark(w *[bucketWords]cell, seq uint32) {
	if m := w[0]; s.current(m) && m.seq()-s.headSeq > seq-s.headSeq {
		return
	}
	w[0] = makeCell(1, seq)
}

// moving is grow's copy of a shard's cells, shared by the shards, which grow
// one at a time.
type moving struct {
	mu    sync.Mutex
	cells []cell
}

// grow moves the live cells, through a copy, into a prefix at least four times
// as large (up to full size); steps are large, as each moves every cell.
func (s *shard) grow() {
	nb := s.nb
	for (s.live+1)*5/2 > int(nb)*bucketCells && nb < s.maxNb {
		nb = min(4*nb, s.maxNb)
	}
	s.moving.mu.Lock()
	defer s.moving.mu.Unlock()
	if n := int(s.nb * bucketWords); cap(s.moving.cells) < n {
		s.moving.cells = make([]cell, n)
	}
	old := s.moving.cells[:s.nb*bucketWords]
	copy(old, s.index)
	clear(s.index[:len(old)])
	// Back new pages before the moves read them: a page read first faults
	// again at the first write.
	if fresh := s.index[len(old) : nb*bucketWords]; !populate(fresh) {
		for i := 0; i < len(fresh); i += pageCells {
			fresh[i] = 0
		}
	}
	s.nb = nb
	for i, c := range old {
		if i%bucketWords != 0 && s.current(c) {
			s.place(c)
		}
	}
}

// ReleaseBatch forgets the digests of ds token holds, so copies are claimed
// anew, and counts them.
func (c *Cache) ReleaseBatch(ds []digest.Digest, token uint64) int {
	if token == noToken || len(ds) == 0 {
		return 0
	}
	released := 0
	c.eachShard(ds, func(s *shard, group []int32) {
		s.prefetch(ds, group)
		for _, i := range group {
			if sl, ci := s.lookup(ds[i]); sl != nil && sl.token == token {
				s.forget(sl, ci)
				released++
			}
		}
	})
	return released
}

// Insert remembers d as committed until expires (unix nanoseconds), e.g.
// from a snapshot. It returns false if d is held or expires is not after now.
func (c *Cache) Insert(d digest.Digest, expires, now int64) bool {
	if expires <= now {
		return false
	}
	s := &c.shards[d.Lo&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	if sl, _ := s.lookup(d); sl != nil {
		return false
	}
	s.push(d, expires, noToken, now)
	return true
}

// Recommit remembers ds, committed, until expires: the keys of a batch whose
// export outlasted their window (they expired while pending) are
// remembered a window from their delivery, as the shared tier does. A key
// another token holds is left to it.
func (c *Cache) Recommit(ds []digest.Digest, expires, now int64) {
	c.eachShard(ds, func(s *shard, group []int32) {
		s.expire(now)
		for _, i := range group {
			if sl, ci := s.lookup(ds[i]); sl != nil {
				if s.flights.holds(sl.token) {
					continue
				}
				s.forget(sl, ci)
			}
			s.push(ds[i], expires, noToken, now)
		}
	})
}

// Disown commits d if token holds it, so a release keeps it: another instance
// delivered it.
func (c *Cache) Disown(d digest.Digest, token uint64) {
	s := &c.shards[d.Lo&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl, _ := s.lookup(d); sl != nil && sl.token == token {
		sl.token = noToken
	}
}

func (c *Cache) eachLocked(fn func(s *shard)) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		fn(s)
		s.mu.Unlock()
	}
}

// Len is the number of keys held, after dropping those expired by now.
func (c *Cache) Len(now int64) int {
	n := 0
	c.eachLocked(func(s *shard) {
		s.expire(now)
		n += s.live
	})
	return n
}

// Evictions is the number of keys evicted before their window ended.
func (c *Cache) Evictions() int64 {
	var n int64
	c.eachLocked(func(s *shard) { n += s.evicted })
	return n
}

// Bytes is the memory the cache's arrays take: the ring's slots backed so
// far (32 bytes a key, in 64 KiB steps) and the index's buckets in use (2.5
// cells of 8 bytes a key, in steps of four times the buckets). Mapped
// outside the Go heap (offheap.go), they are in no figure of the Go
// runtime's, memory_limiter's included; they never shrink while the cache
// lives, and reach 54.9 bytes a key at max_entries, once the ring went
// round.
func (c *Cache) Bytes() int64 {
	var n int64
	c.eachLocked(func(s *shard) {
		n += int64(s.ready)*int64(unsafe.Sizeof(slot{})) + int64(s.nb)*bucketWords*int64(unsafe.Sizeof(cell(0)))
	})
	return n
}

// Range calls fn, per shard under its lock, for each committed key, oldest
// first; fn must not call c.
func (c *Cache) Range(now int64, fn func(d digest.Digest, expires int64)) {
	c.eachLocked(func(s *shard) {
		s.expire(now)
		for k := range s.used {
			sl := &s.ring[s.at(k)]
			if sl.expires != 0 && !c.flights.holds(sl.token) {
				fn(sl.d, sl.expires)
			}
		}
	})
}
