package localcache

import (
	"math/bits"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// cell is one index entry: the ring position plus one, in the low 32 bits
// (0 marks an empty cell), and 32 bits of the digest, in the high 32 bits,
// compared before the ring slot is touched.
type cell uint64

func (c cell) pos() int            { return int(uint32(c)) - 1 }
func (c cell) fingerprint() uint32 { return uint32(c >> 32) }

func makeCell(d digest.Digest, pos int) cell {
	return cell(uint64(fingerprint(d))<<32 | uint64(uint32(pos+1)))
}

// The shard is chosen by the low bits of Lo, independent of Hi. The low 32
// bits of Hi are the fingerprint, and their low bits the home cell, so a
// cell alone says where it belongs: growing and deleting never read the ring.
func fingerprint(d digest.Digest) uint32 { return uint32(d.Hi) }

func (x *index) home(c cell) uint64 { return uint64(c.fingerprint()) & x.mask }

// index maps digests to ring positions with linear probing. It grows by
// doubling, from a small start up to the size its shard's capacity needs at
// a load of at most 3/4, so an idle cache with a large bound stays small.
type index struct {
	cells []cell
	mask  uint64
	count int
	max   int // cells at full size
}

const minIndexCells = 1024

func (x *index) init(capacity int) {
	x.max = 1 << bits.Len(uint(capacity*4/3+1))
	n := min(minIndexCells, x.max)
	x.cells = make([]cell, n)
	x.mask = uint64(n - 1)
	x.count = 0
}

// full reports whether one more entry would pass a load of 3/4 and the
// index may still grow.
func (x *index) full() bool {
	return (x.count+1)*4 > len(x.cells)*3 && len(x.cells) < x.max
}

// lookup returns the cell index holding d.
func (x *index) lookup(d digest.Digest, s *shard) (uint64, bool) {
	fp := fingerprint(d)
	for i := uint64(fp) & x.mask; ; i = (i + 1) & x.mask {
		c := x.cells[i]
		if c == 0 {
			return 0, false
		}
		if c.fingerprint() == fp && s.at(c.pos()).d == d {
			return i, true
		}
	}
}

// locate returns the index of cell c. A cell is unique, since no two live
// keys share a ring position.
func (x *index) locate(c cell) (uint64, bool) {
	for i := x.home(c); ; i = (i + 1) & x.mask {
		switch x.cells[i] {
		case c:
			return i, true
		case 0:
			return 0, false
		}
	}
}

// insert adds d at ring position pos; d must not be present.
func (x *index) insert(d digest.Digest, pos int) {
	x.place(makeCell(d, pos))
	x.count++
}

func (x *index) place(c cell) {
	i := x.home(c)
	for x.cells[i] != 0 {
		i = (i + 1) & x.mask
	}
	x.cells[i] = c
}

// grow doubles the index and re-places every cell.
func (x *index) grow() {
	old := x.cells
	x.cells = make([]cell, 2*len(old))
	x.mask = uint64(len(x.cells) - 1)
	for _, c := range old {
		if c != 0 {
			x.place(c)
		}
	}
}

// remove empties cell i and shifts later cells of its probe run back, so
// lookups never need tombstones.
func (x *index) remove(i uint64) {
	x.cells[i] = 0
	x.count--
	for j := (i + 1) & x.mask; x.cells[j] != 0; j = (j + 1) & x.mask {
		home := x.home(x.cells[j])
		// Move cell j into the hole at i if its home is not in (i, j].
		if (j-home)&x.mask >= (j-i)&x.mask {
			x.cells[i], x.cells[j] = x.cells[j], 0
			i = j
		}
	}
}
