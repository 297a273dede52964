package localcache

import (
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// cell is one index entry: 32 bits of the digest (the fingerprint) in the
// high half, compared before the ring slot is touched, and in the low half
// the key's sequence number in its shard's ring, from which its ring
// position follows. 0 marks an empty cell; the fingerprint's low bit is
// always set, so no entry is 0.
//
// An evicted or expired key leaves its cell behind: its sequence number
// has fallen behind the head of the ring, which makes the cell stale
// without any write. Evicting the oldest key therefore costs no index work
// (before, it was a random read and a delete in an index far larger than the
// CPU caches, as much as the claim itself). A stale cell is taken over by
// the next insert whose probe passes it, and when stale cells crowd the
// index, it is rebuilt from its live cells (see reserve).
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
// low bits of Lo, independent of Hi; the home cell by the high bits of the
// fingerprint, so a cell alone says where it belongs: rebuilding and
// deleting never read the ring.
func fingerprint(d digest.Digest) uint32 { return uint32(d.Hi) | 1 }

// index maps digests to ring sequence numbers with linear probing. At full
// size it has 2.5 cells per ring slot of its shard, so live keys fill at
// most 40% of it; it starts small and doubles up to that size, so an idle
// cache with a large bound stays small. Live and stale cells together are
// kept to at most 3/4 of the cells: the 35% between is room for stale cells,
// and the larger it is, the rarer the purges that delete them (2.5 cells per
// slot rather than 2 made a full cache's claims about 10% cheaper, for 4
// more bytes per key).
type index struct {
	cells []cell
	n     uint64 // len(cells)
	count int    // cells not empty: live and stale
	max   int    // cells at full size
}

const minIndexCells = 1024

func (x *index) init(capacity int) {
	x.max = 5 * max(capacity, 1) / 2
	x.alloc(min(minIndexCells, x.max))
}

func (x *index) alloc(n int) {
	x.cells = make([]cell, n)
	x.n = uint64(n)
	x.count = 0
}

// home is where the probe for fingerprint fp starts: a multiply-shift maps
// the fingerprint onto any number of cells, not only powers of two.
func (x *index) home(fp uint32) uint64 { return uint64(fp) * x.n >> 32 }

func (x *index) next(i uint64) uint64 {
	i++
	if i == x.n {
		return 0
	}
	return i
}

// dist is how far cell j lies after cell i, going round.
func (x *index) dist(i, j uint64) uint64 {
	if j >= i {
		return j - i
	}
	return j + x.n - i
}

// noCell is a cell index no index has.
const noCell = ^uint64(0)

// lookup returns d's ring position and the index cell holding it. The probe passes
// stale cells and ends at an empty cell. When d is absent, free is where
// insertAt may put it: the first stale cell of the probe, or the empty cell
// that ended it.
func (x *index) lookup(d digest.Digest, s *shard) (pos int, ci uint64, ok bool, free uint64) {
	fp := fingerprint(d)
	free = noCell
	for i := x.home(fp); ; i = x.next(i) {
		c := x.cells[i]
		if c == 0 {
			x.trim(i, s)
			if free == noCell {
				free = i
			}
			return 0, 0, false, free
		}
		p, live := s.posOf(c.seq())
		if !live {
			if free == noCell {
				free = i
			}
			continue
		}
		if c.fingerprint() == fp {
			if sl := s.at(p); sl.d == d && sl.expires != 0 {
				return p, i, true, noCell
			}
		}
	}
}

// trim empties the stale cells that end the run before the empty cell i.
// A cell followed by an empty one is on no other cell's probe path, so it
// can be emptied without moving any: this keeps runs short between
// rebuilds at the cost of a few reads of cells just loaded. A free cell
// lookup chose among them is then empty, and still where d's probe ends.
func (x *index) trim(i uint64, s *shard) {
	for {
		if i == 0 {
			i = x.n
		}
		i--
		c := x.cells[i]
		if c == 0 {
			return
		}
		if _, live := s.posOf(c.seq()); live {
			return
		}
		x.cells[i] = 0
		x.count--
	}
}

// insertAt adds a cell for the key with fingerprint fp at ring sequence
// seq; the key must not be present. It takes cell free if lookup offered it
// and the index has not changed since, else (free is noCell) the first stale
// or empty cell of the probe.
func (x *index) insertAt(free uint64, fp, seq uint32, s *shard) {
	for {
		if free == noCell {
			free = x.firstFree(fp, s)
		}
		if x.cells[free] != 0 { // stale: taken over
			x.cells[free] = makeCell(fp, seq)
			return
		}
		if x.reserve(s) {
			x.cells[free] = makeCell(fp, seq)
			x.count++
			return
		}
		free = noCell // rebuilt: probe again
	}
}

// firstFree returns the first stale or empty cell of fp's probe.
func (x *index) firstFree(fp uint32, s *shard) uint64 {
	i := x.home(fp)
	for {
		c := x.cells[i]
		if c == 0 {
			return i
		}
		if _, live := s.posOf(c.seq()); !live {
			return i
		}
		i = x.next(i)
	}
}

// reserve makes room for one more non-empty cell: it reports true if there
// is room, or rebuilds the index and reports false, so the caller probes
// again. After a rebuild there is room: the live cells fill at most 40% of
// the full-size index, and the ring has just been given a free slot.
func (x *index) reserve(s *shard) bool {
	if (x.count+1)*4 <= int(x.n)*3 {
		return true
	}
	x.rebuild(s)
	return false
}

// rebuild drops the stale cells. While the live cells alone would fill
// more than 40% of the array and it is below full size, it moves them into
// one twice as large (at most full size); otherwise it deletes the stale
// cells in place, with no allocation. It reads cells only.
func (x *index) rebuild(s *shard) {
	n := int(x.n)
	for (s.live+1)*5/2 > n && n < x.max {
		n = min(2*n, x.max)
	}
	if n == int(x.n) {
		x.purge(s)
		return
	}
	old := x.cells
	x.alloc(n)
	for _, c := range old {
		if c == 0 {
			continue
		}
		if _, live := s.posOf(c.seq()); !live {
			continue
		}
		i := x.home(c.fingerprint())
		for x.cells[i] != 0 {
			i = x.next(i)
		}
		x.cells[i] = c
		x.count++
	}
}

// purge deletes every stale cell in place. It walks once round the array
// from an empty cell, so no probe run is cut by the start of the walk; a
// deletion shifts later cells of the run back into the hole, which is then
// looked at again.
func (x *index) purge(s *shard) {
	start := uint64(0)
	for x.cells[start] != 0 {
		start++ // count < n: there is an empty cell
	}
	i := x.next(start)
	for steps := uint64(1); steps < x.n; {
		c := x.cells[i]
		if c != 0 {
			if _, live := s.posOf(c.seq()); !live {
				x.remove(i)
				continue
			}
		}
		i = x.next(i)
		steps++
	}
}

// remove empties cell i and shifts later cells of its probe run back, so
// lookups never need tombstones.
func (x *index) remove(i uint64) {
	x.cells[i] = 0
	x.count--
	for j := x.next(i); x.cells[j] != 0; j = x.next(j) {
		home := x.home(x.cells[j].fingerprint())
		// Move cell j into the hole at i if its home is not in (i, j].
		if x.dist(home, j) >= x.dist(i, j) {
			x.cells[i], x.cells[j] = x.cells[j], 0
			i = j
		}
	}
}
