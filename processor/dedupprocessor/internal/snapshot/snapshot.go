// Package snapshot is the on-disk form of the local cache, saved to a storage
// extension on shutdown (and periodically) and restored on start, so that a
// restart does not open a window for duplicates.
//
// A snapshot holds digests and their expiries only: never a record, an
// attribute value or anything else a digest was computed from.
//
// # Layout (version 1)
//
// All integers are big-endian; n is the entry count.
//
//	offset      size  field
//	0           4     magic "OCDD"
//	4           2     version, uint16 = 1
//	6           8     window of the writing cache, int64 nanoseconds
//	14          8     written at, int64 unix nanoseconds
//	22          8     identity fingerprint, uint64 (see Meta.Fingerprint)
//	30          8     entry count n, uint64
//	38          24·n  entries, each: digest Hi uint64, digest Lo uint64,
//	                  expiry int64 unix nanoseconds
//	38+24·n     8     xxh3-64 (seed 0) of bytes [0, 38+24·n)
//
// A snapshot of n entries is therefore exactly 46+24·n bytes (24 MB for a
// million keys), and its length is known from its header alone.
//
// # Versions
//
// Any change to the layout takes a new version number; the magic and the
// version stay where they are in every version. A reader refuses a version it
// does not know (ErrVersion) rather than guessing. Because a snapshot is only
// a cache, refusing one costs a single window of possible duplicates, so
// there is no migration: a new build starts empty once and writes its own
// version from then on.
//
// # Corrupt snapshots
//
// Decode and Restore check the magic, the version, the length, the checksum
// and the fingerprint before they hand over a single entry, so a damaged or
// foreign snapshot restores nothing, never part of a cache. The caller then
// starts with an empty cache and logs a warning; a bad snapshot never fails a
// start.
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/zeebo/xxh3"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Version is the format version this package writes and the only one it
// reads.
const Version uint16 = 1

const (
	magic       = "OCDD"
	headerLen   = 38
	entryLen    = digest.Size + 8
	checksumLen = 8
	countOffset = 30
)

// The errors Decode and Restore return, always wrapped with the detail.
var (
	// ErrTruncated: the input ends before the length its header implies.
	ErrTruncated = errors.New("snapshot truncated")
	// ErrCorrupt: the checksum does not match, or bytes follow the checksum.
	ErrCorrupt = errors.New("snapshot corrupt")
	// ErrVersion: the snapshot was written in a version this build does not
	// read.
	ErrVersion = errors.New("snapshot version unknown")
	// ErrForeign: the input is not a snapshot (wrong magic), or it was taken
	// under a different identity configuration (wrong fingerprint), so its
	// digests mean nothing to this one.
	ErrForeign = errors.New("snapshot foreign")
)

// Meta describes a snapshot.
type Meta struct {
	// Window is the window of the cache that wrote the snapshot, in
	// nanoseconds. Restoring clamps to the restoring cache's own window.
	Window int64
	// WrittenAt is when the snapshot was written, in unix nanoseconds.
	WrittenAt int64
	// Fingerprint identifies the configuration digests were computed under
	// (key expressions, identity encoding): a snapshot is restored only into a
	// process with the same fingerprint, since under another one its digests
	// match nothing, or the wrong things. The caller computes it.
	Fingerprint uint64
}

// encodedLen is the size of a snapshot of n entries.
func encodedLen(n int) int { return headerLen + entryLen*n + checksumLen }

// appendEncode appends a snapshot of entries (digest, expiry in unix
// nanoseconds) to dst and returns the extended slice. Entries are written in
// the order entries yields them, which Decode preserves; the checksum covers
// only the appended bytes.
func appendEncode(dst []byte, meta Meta, entries iter.Seq2[digest.Digest, int64]) []byte {
	start := len(dst)
	dst = append(dst, magic...)
	dst = binary.BigEndian.AppendUint16(dst, Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(meta.Window))
	dst = binary.BigEndian.AppendUint64(dst, uint64(meta.WrittenAt))
	dst = binary.BigEndian.AppendUint64(dst, meta.Fingerprint)
	dst = binary.BigEndian.AppendUint64(dst, 0) // the count, known at the end
	var n uint64
	for d, expires := range entries {
		dst = d.AppendBinary(dst)
		dst = binary.BigEndian.AppendUint64(dst, uint64(expires))
		n++
	}
	binary.BigEndian.PutUint64(dst[start+countOffset:], n)
	return binary.BigEndian.AppendUint64(dst, xxh3.Hash(dst[start:]))
}

// Decode checks b as a whole and then calls fn for each entry that is still
// live at now, in the order they were written. An entry whose expiry is at or
// before now is skipped; one that expires later than now+window is clamped to
// now+window, so a snapshot written under a longer window never holds a key
// longer than the restoring process's window (window <= 0 keeps nothing).
//
// It returns the snapshot's Meta and the number of entries passed to fn. On
// error, fn has not been called and the error wraps ErrTruncated, ErrCorrupt,
// ErrVersion or ErrForeign. Decode accepts any input without panicking, and
// allocates nothing for the entries: a header claiming more entries than b
// holds is refused by its length.
//
// Entries are in the order the cache ranged over them: oldest first within
// each shard, not overall. A cache assumes keys arrive in expiry order, so
// restore with Restore, which sorts, rather than inserting in Decode's order.
func decode(b []byte, fingerprint uint64, window, now int64, fn func(d digest.Digest, expires int64)) (Meta, int, error) {
	meta, entries, err := parse(b, fingerprint)
	if err != nil {
		return Meta{}, 0, err
	}
	limit := addSat(now, window)
	n := 0
	for e := range len(entries) / entryLen {
		d, expires := entryAt(entries, e)
		if expires = min(expires, limit); expires > now {
			fn(d, expires)
			n++
		}
	}
	return meta, n, nil
}

// parse validates b and returns its Meta and its entries region.
func parse(b []byte, fingerprint uint64) (Meta, []byte, error) {
	if len(b) < len(magic)+2 {
		if k := min(len(b), len(magic)); string(b[:k]) != magic[:k] {
			return Meta{}, nil, fmt.Errorf("%w: %d bytes, not a snapshot", ErrForeign, len(b))
		}
		return Meta{}, nil, fmt.Errorf("%w: %d bytes, shorter than the header", ErrTruncated, len(b))
	}
	if string(b[:len(magic)]) != magic {
		return Meta{}, nil, fmt.Errorf("%w: magic %q, want %q", ErrForeign, b[:len(magic)], magic)
	}
	if v := binary.BigEndian.Uint16(b[len(magic):]); v != Version {
		return Meta{}, nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrVersion, v, Version)
	}
	if len(b) < headerLen+checksumLen {
		return Meta{}, nil, fmt.Errorf("%w: %d bytes, shorter than the header and checksum (%d)", ErrTruncated, len(b), headerLen+checksumLen)
	}
	// Compared by division, so that no claimed count can overflow the
	// arithmetic or be trusted for an allocation.
	count := binary.BigEndian.Uint64(b[countOffset:])
	if room := uint64(len(b)-headerLen-checksumLen) / entryLen; count > room {
		return Meta{}, nil, fmt.Errorf("%w: header claims %d entries, %d bytes hold at most %d", ErrTruncated, count, len(b), room)
	}
	end := headerLen + int(count)*entryLen
	if want := end + checksumLen; len(b) != want {
		return Meta{}, nil, fmt.Errorf("%w: %d bytes follow the checksum", ErrCorrupt, len(b)-want)
	}
	if got, want := xxh3.Hash(b[:end]), binary.BigEndian.Uint64(b[end:]); got != want {
		return Meta{}, nil, fmt.Errorf("%w: checksum %016x, stored %016x", ErrCorrupt, got, want)
	}
	meta := Meta{
		Window:      int64(binary.BigEndian.Uint64(b[6:])),
		WrittenAt:   int64(binary.BigEndian.Uint64(b[14:])),
		Fingerprint: binary.BigEndian.Uint64(b[22:]),
	}
	if meta.Fingerprint != fingerprint {
		return Meta{}, nil, fmt.Errorf("%w: taken under identity fingerprint %016x, this configuration is %016x", ErrForeign, meta.Fingerprint, fingerprint)
	}
	return meta, b[headerLen:end], nil
}

// entryAt reads entry i of a validated entries region.
func entryAt(entries []byte, i int) (digest.Digest, int64) {
	e := entries[i*entryLen : (i+1)*entryLen]
	return digest.Digest{Hi: binary.BigEndian.Uint64(e), Lo: binary.BigEndian.Uint64(e[8:])},
		int64(binary.BigEndian.Uint64(e[16:]))
}

// expiryAt reads the expiry of entry i of a validated entries region.
func expiryAt(entries []byte, i int) int64 {
	return int64(binary.BigEndian.Uint64(entries[i*entryLen+digest.Size:]))
}

// addSat is a+b, saturated at the int64 bounds instead of wrapping.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}
