// Package localcache is the local tier: a bounded, sharded set of digests,
// each remembered for a fixed window from its first claim.
//
// Every key lives exactly one window, so the order keys were claimed in is
// also the order they expire in. Each shard therefore keeps its keys in a
// ring in claim order: the head is both the next key to expire and the oldest
// key, which makes expiry and evict-oldest-first the same O(1) pop.
//
// A key is found through an index of 8-byte cells (32 bits of the digest
// and the key's sequence number in the ring) in buckets of one cache line,
// so a lookup reads one line of the index and, only when those 32 bits
// match, the ring slot. Evicting or expiring the oldest key touches no
// index cell: its cell turns stale as the head of the ring passes it, and
// the next key inserted into its bucket reuses it (see index). A key costs
// a 32-byte ring slot and 2.5 index cells (7 to a 64-byte bucket): about
// 56 bytes once the cache has been full. Neither the ring nor the index
// holds pointers: they are mapped outside the Go heap (offheap.go), so the
// garbage collector neither scans them nor counts them.
package localcache

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Result is the outcome of a Claim.
type Result uint8

const (
	// Claimed: the digest was not held; it now is, by the caller's token.
	Claimed Result = iota
	// HeldBySelf: the digest is held by the caller's own token (a copy
	// earlier in the same batch).
	HeldBySelf
	// Held: the digest is held within its window by a committed claim: its
	// record was delivered.
	Held
	// Pending: the digest is held by the claim of a token that is still in
	// flight (see Begin): its record is on its way downstream and may yet
	// be released.
	Pending
)

// noToken marks an entry that no claim owns (restored, or learned from the
// shared tier): it counts as committed, and Release never removes it.
const noToken uint64 = 0

type slot struct {
	d       digest.Digest
	expires int64 // unix nanoseconds; 0 marks a released slot
	token   uint64
}

type shard struct {
	mu      sync.Mutex
	index   index
	ring    []slot // mapped whole at New; its pages are used as keys arrive
	size    int    // ring capacity of this shard
	head    int    // position of the oldest slot
	headSeq uint32 // its sequence number: keys are numbered as pushed
	used    int    // slots between head and tail, released ones included
	live    int    // slots holding a key
	evicted int64
	sink    cell     // where prefetch leaves its reads
	flights *flights // the cache's
	arena   *arena   // the cache's: where the ring and the index live
	_       [32]byte // keep shards on separate cache lines
}

// Cache is safe for concurrent use. Claims of different digests mostly take
// different locks; no lock is held across more than one digest.
//
// A key is held by the token that claimed it. While that token is in flight
// (between Begin and End) the key is pending: the batch that claimed it has
// not been accepted downstream yet. Once the token has ended, the keys it
// still holds are committed.
type Cache struct {
	shards  []shard
	mask    uint64
	window  int64
	flights flights
	arena   *arena
}

// flights is the set of tokens in flight. It is only taken inside a shard's
// lock or alone, never the other way round.
type flights struct {
	mu     sync.Mutex
	tokens map[uint64]struct{}
	// oldest is the smallest token in flight, 0 if none: a key of a
	// smaller token is committed, known without the lock.
	oldest atomic.Uint64
}

// pending reports whether token is in flight; the caller holds f.mu.
func (f *flights) pending(token uint64) bool {
	_, ok := f.tokens[token]
	return ok
}

// holds reports whether token is in flight; the caller holds a shard's
// lock, not f.mu.
func (f *flights) holds(token uint64) bool {
	if o := f.oldest.Load(); token == noToken || o == 0 || token < o {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending(token)
}

// New returns a cache of at most maxEntries digests, each remembered for
// window nanoseconds from its first claim. maxEntries must be >= 1.
func New(maxEntries int, windowNanos int64) *Cache {
	n := shardCount(maxEntries)
	c := &Cache{shards: make([]shard, n), mask: uint64(n - 1), window: windowNanos,
		flights: flights{tokens: map[uint64]struct{}{}}, arena: newArena()}
	// The arena outlives no cache: its mappings go when the cache does.
	runtime.AddCleanup(c, func(a *arena) { a.freeAll() }, c.arena)
	base, extra := maxEntries/n, maxEntries%n
	for i := range c.shards {
		size := base
		if i < extra {
			size++
		}
		c.shards[i].size = size
		c.shards[i].flights = &c.flights
		c.shards[i].arena = c.arena
		c.shards[i].index.init(size, c.arena)
		c.shards[i].ring = c.arena.slots(size)
	}
	return c
}

// shardCount keeps small caches in one shard, so their eviction order is
// exactly oldest first, and spreads large ones over 64 locks; there the order
// is oldest first within each shard, which digests fill evenly.
func shardCount(maxEntries int) int {
	if maxEntries < 64*1024 {
		return 1
	}
	return 64
}

func (c *Cache) shardOf(d digest.Digest) *shard {
	return &c.shards[d.Lo&c.mask]
}

// Begin puts token in flight: the keys it claims are pending until End.
// Tokens must be unique and not noToken.
func (c *Cache) Begin(token uint64) {
	c.flights.mu.Lock()
	c.flights.tokens[token] = struct{}{}
	if o := c.flights.oldest.Load(); o == 0 || token < o {
		c.flights.oldest.Store(token)
	}
	c.flights.mu.Unlock()
}

// End takes token out of flight: the keys it still holds are committed from
// now on. Release the keys of a batch that was not delivered before End, so
// that no claim ever reads them as committed.
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

// Claim records d for token unless it is already held within its window,
// and returns who holds it. now is unix nanoseconds. When the cache is full,
// the oldest key is evicted to make room: a new key is never refused.
func (c *Cache) Claim(d digest.Digest, token uint64, now int64) (Result, uint64) {
	s := c.shardOf(d)
	s.mu.Lock()
	s.expire(now)
	res, owner := s.claim(d, token, now, c.window)
	if res == Held {
		var locked bool
		if res, locked = c.heldStateLocked(owner, false); locked {
			c.flights.mu.Unlock()
		}
	}
	s.mu.Unlock()
	return res, owner
}

// heldState tells a key held by owner apart as Held (committed) or Pending.
// The caller holds the key's shard lock, so the key cannot be released
// meanwhile, and c.flights.mu: a holder that is not in flight has ended
// without releasing the key, so it committed.
func (c *Cache) heldState(owner uint64) Result {
	if owner == noToken || !c.flights.pending(owner) {
		return Held
	}
	return Pending
}

// Insert remembers d as held until expires (unix nanoseconds) without a
// token, e.g. when restoring a snapshot. It returns false if d is already
// held or expires is not after now.
func (c *Cache) Insert(d digest.Digest, expires, now int64) bool {
	if expires <= now {
		return false
	}
	s := c.shardOf(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	if _, _, ok := s.index.lookup(d, s); ok {
		return false
	}
	s.push(d, expires, noToken, now)
	return true
}

// Release forgets d if it is still held by token, so a later copy is
// claimed anew. It reports whether d was released.
func (c *Cache) Release(d digest.Digest, token uint64) bool {
	s := c.shardOf(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release(d, token)
}

// release is Release under the shard's lock.
func (s *shard) release(d digest.Digest, token uint64) bool {
	pos, ci, ok := s.index.lookup(d, s)
	if !ok {
		return false
	}
	sl := s.at(pos)
	if sl.token != token || token == noToken {
		return false
	}
	s.forget(sl, ci)
	return true
}

// Disown clears the token of d if token holds it, so that a later Release by
// that token keeps it and it counts as committed: the shared tier said
// another instance delivered it.
func (c *Cache) Disown(d digest.Digest, token uint64) {
	s := c.shardOf(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos, _, ok := s.index.lookup(d, s); ok {
		if sl := s.at(pos); sl.token == token {
			sl.token = noToken
		}
	}
}

// Len is the number of keys held, after dropping those expired by now.
func (c *Cache) Len(now int64) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.expire(now)
		n += s.live
		s.mu.Unlock()
	}
	return n
}

// Evictions is the number of keys evicted, since the cache was made, before
// their window ended: a sign that maxEntries is too small for the traffic.
func (c *Cache) Evictions() int64 {
	var n int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.evicted
		s.mu.Unlock()
	}
	return n
}

// Range calls fn for each committed key with its expiry, oldest first per
// shard, holding one shard's lock at a time. Pending keys are left out:
// their batches are still on their way downstream. fn must not call the
// cache.
func (c *Cache) Range(now int64, fn func(d digest.Digest, expires int64)) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.expire(now)
		c.flights.mu.Lock()
		for k := 0; k < s.used; k++ {
			sl := s.at((s.head + k) % s.size)
			if sl.expires != 0 && (sl.token == noToken || !c.flights.pending(sl.token)) {
				fn(sl.d, sl.expires)
			}
		}
		c.flights.mu.Unlock()
		s.mu.Unlock()
	}
}

func (s *shard) at(pos int) *slot { return &s.ring[pos] }

// expire pops the keys whose window has ended, and released slots, from the
// head of the ring. A key whose window ended while its batch is still in
// flight stays, pending, until the batch ends: a copy meeting it waits for
// the export's outcome, as within the window (the keys behind it expire
// late meanwhile, within the cache's bound).
func (s *shard) expire(now int64) {
	for s.used > 0 {
		sl := s.at(s.head)
		if sl.expires > now || sl.expires != 0 && s.flights.holds(sl.token) {
			return
		}
		s.pop(sl)
	}
}

// posOf returns the ring position of the key numbered seq, and false if
// that key has left the ring (its index cell is stale).
func (s *shard) posOf(seq uint32) (int, bool) {
	off := seq - s.headSeq
	if off >= uint32(s.used) {
		return 0, false
	}
	pos := s.head + int(off)
	if pos >= s.size {
		pos -= s.size
	}
	return pos, true
}

// tailSeq is the sequence number the next pushed key gets.
func (s *shard) tailSeq() uint32 { return s.headSeq + uint32(s.used) }

// forget removes a held key whose cell is index word ci, leaving its ring
// slot released.
func (s *shard) forget(sl *slot, ci uint64) {
	s.index.remove(ci)
	sl.expires = 0
	s.live--
}

// pop drops the head of the ring. Its index cell, if it has one, turns
// stale by the head moving past it: no index work.
func (s *shard) pop(sl *slot) {
	if sl.expires != 0 {
		s.live--
	}
	s.headSeq++
	s.head++
	if s.head == s.size {
		s.head = 0
	}
	s.used--
}

// push appends a key at the tail, evicting the head when the ring is full.
// A key given to Insert may expire before keys ahead of it in the ring; it
// then waits for the head to reach it (counting toward the bound meanwhile),
// and Claim treats it as absent once its expiry has passed.
func (s *shard) push(d digest.Digest, expires int64, token uint64, now int64) {
	if s.used == s.size {
		sl := s.at(s.head)
		if sl.expires > now {
			s.evicted++
		}
		s.pop(sl)
	}
	pos := s.head + s.used
	if pos >= s.size {
		pos -= s.size
	}
	sl := s.at(pos)
	*sl = slot{d: d, expires: expires, token: token}
	s.index.insert(fingerprint(d), s.tailSeq(), s)
	s.used++
	s.live++
}
