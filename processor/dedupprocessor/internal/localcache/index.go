package localcache

import (
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// cell is one index entry: 32 bits of the digest (the fingerprint) in the
// high half, compared before the ring slot is touched, and in the low half
// the key's sequence number in its shard's ring, from which its ring
// position follows. 0 marks an empty cell; the fingerprint's low bit is
// always set, so no entry is 0 and no entry's fingerprint matches an empty
// cell.
//
// An evicted or expired key leaves its cell behind: its sequence number
// has fallen behind the head of the ring, which makes the cell stale
// without any write. Evicting the oldest key therefore costs no index work
// (otherwise it is a random read and a delete in an index far larger than
// the CPU caches, as much as the claim itself). A stale cell is taken over
// by the next key inserted into its bucket.
//
// Sequence numbers are compared modulo 2^32 against the ring's window of at
// most size < 2^32 keys, so a live cell is always recognised as live. A
// stale cell that survived 2^32 further keys would look live again; that
// costs nothing but its place, since a lookup still compares the slot's
// whole digest, and it turns stale again when the head passes.
type cell uint64

func (c cell) seq() uint32         { return uint32(c) }
func (c cell) fingerprint() uint32 { return uint32(c >> 32) }

func makeCell(fp, seq uint32) cell { return cell(uint64(fp)<<32 | uint64(seq)) }

// fingerprint is the part of d the index keeps. The shard is chosen by the
// low bits of Lo, independent of Hi; the home bucket by the high bits of
// the fingerprint, so a cell alone says where it belongs: growing the index
// never reads the ring.
func fingerprint(d digest.Digest) uint32 { return uint32(d.Hi) | 1 }

// Buckets of the index: one 64-byte cache line each, a mark and 7 cells.
const (
	bucketWords = 8
	bucketCells = bucketWords - 1
)

// index maps digests to ring sequence numbers. It is an array of buckets,
// each one cache line: a key's cell is in its home bucket unless that
// bucket's 7 cells were all live when it was inserted; it then went on to
// the next bucket, and the bucket it passed records the key's sequence
// number in its mark (word 0). A lookup reads the home bucket's line,
// compares its 7 fingerprints, and goes on to the next bucket only while
// the mark names a live key: nearly every claim touches one line and
// probes nothing. Marks turn stale as cells do, when the ring's head
// passes the key they name, since a bucket's overflow ends with the newest
// key that overflowed it (keys leave in the order they came). Nothing ever
// needs purging: a stale cell is reused by the next insert into its
// bucket, and an emptied cell (a released key) ends no lookup.
//
// At full size there are 2.5 cells per ring slot of the shard, so a bucket
// holds 2.8 live keys on average and is full (7) for 2-3% of inserts. The
// index starts small and doubles up to that size, so an idle cache with a
// large bound stays small.
type index struct {
	words []cell // nb buckets of bucketWords words
	nb    uint64
	maxNb uint64 // buckets at full size
}

const minBuckets = 128

// bucketsFor is the number of buckets whose cells hold n live keys at 40%.
func bucketsFor(n int) uint64 {
	return uint64((5*max(n, 1)/2 + bucketCells - 1) / bucketCells)
}

func (x *index) init(capacity int, a *arena) {
	x.maxNb = bucketsFor(capacity)
	x.alloc(min(minBuckets, x.maxNb), a)
}

func (x *index) alloc(nb uint64, a *arena) {
	x.words = a.cells(int(nb * bucketWords))
	x.nb = nb
}

// home is the bucket fingerprint fp belongs to: a multiply-shift maps the
// fingerprint onto any number of buckets, not only powers of two.
func (x *index) home(fp uint32) uint64 { return uint64(fp) * x.nb >> 32 }

func (x *index) bucket(b uint64) *[bucketWords]cell {
	return (*[bucketWords]cell)(x.words[b*bucketWords : (b+1)*bucketWords])
}

func (x *index) next(b uint64) uint64 {
	b++
	if b == x.nb {
		return 0
	}
	return b
}

// overflowed reports whether a live key passed the bucket with mark m.
func overflowed(m cell, s *shard) bool {
	if m == 0 {
		return false
	}
	_, live := s.posOf(m.seq())
	return live
}

// lookup returns d's ring position and the word holding its cell.
func (x *index) lookup(d digest.Digest, s *shard) (pos int, ci uint64, ok bool) {
	fp := fingerprint(d)
	b := x.home(fp)
	for range x.nb {
		w := x.bucket(b)
		for j := 1; j < bucketWords; j++ {
			c := w[j]
			if c.fingerprint() != fp {
				continue
			}
			p, live := s.posOf(c.seq())
			if !live {
				continue
			}
			if sl := s.at(p); sl.d == d && sl.expires != 0 {
				return p, b*bucketWords + uint64(j), true
			}
		}
		if !overflowed(w[0], s) {
			break
		}
		b = x.next(b)
	}
	return 0, 0, false
}

// insert adds a cell for the key with fingerprint fp at ring sequence seq,
// the newest in the ring. The key must not be present, and the shard's
// live count must not include it yet.
func (x *index) insert(fp, seq uint32, s *shard) {
	if x.nb < x.maxNb && (s.live+1)*5/2 > int(x.nb)*bucketCells {
		x.grow(s)
	}
	x.place(makeCell(fp, seq), s)
}

// place puts c into the first cell of its probe that is empty or stale,
// marking each full bucket it passes. There is always one: live keys fill
// at most 40% of the full-size index.
func (x *index) place(c cell, s *shard) {
	b := x.home(c.fingerprint())
	for {
		w := x.bucket(b)
		for j := 1; j < bucketWords; j++ {
			if w[j] == 0 {
				w[j] = c
				return
			}
			if _, live := s.posOf(w[j].seq()); !live {
				w[j] = c
				return
			}
		}
		mark(w, c.seq(), s)
		b = x.next(b)
	}
}

// mark records that the key numbered seq passed the full bucket w, unless
// the mark already names a later key that is still live.
func mark(w *[bucketWords]cell, seq uint32, s *shard) {
	if m := w[0]; m != 0 {
		if _, live := s.posOf(m.seq()); live && m.seq()-s.headSeq > seq-s.headSeq {
			return
		}
	}
	w[0] = makeCell(1, seq)
}

// remove empties the cell in word ci. No lookup ends at an empty cell, so
// nothing moves.
func (x *index) remove(ci uint64) { x.words[ci] = 0 }

// grow moves the live cells into an index twice as large, or more, up to
// full size, while they would fill more than 40% of it. Stale cells and
// marks are left behind. It reads cells only.
func (x *index) grow(s *shard) {
	nb := x.nb
	for (s.live+1)*5/2 > int(nb)*bucketCells && nb < x.maxNb {
		nb = min(2*nb, x.maxNb)
	}
	old := x.words
	x.alloc(nb, s.arena)
	for i, c := range old {
		if i%bucketWords == 0 || c == 0 {
			continue
		}
		if _, live := s.posOf(c.seq()); live {
			x.place(c, s)
		}
	}
	s.arena.freeCells(old)
}
