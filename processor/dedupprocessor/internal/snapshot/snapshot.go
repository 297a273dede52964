// Package snapshot is the on-disk form of the local cache, saved to a storage
// extension and restored on start, so that a restart does not open a window
// for duplicates. It holds digests and expiries only, never what a digest
// was computed from.
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
// Any change to the layout takes a new version; magic and version stay
// where they are. A reader refuses a version it does not know: a snapshot is
// only a cache, so a new build starts empty once rather than migrating.
//
// A snapshot is checked whole before a single entry is handed over, so a
// damaged or foreign one restores nothing, never part of a cache.
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/zeebo/xxh3"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Version is the format version written, and the only one read.
const Version uint16 = 1

const (
	magic       = "OCDD"
	headerLen   = 38
	entryLen    = digest.Size + 8
	checksumLen = 8
	countOffset = 30
)

// The errors Restore returns, wrapped with the detail.
var (
	ErrTruncated = errors.New("snapshot truncated")
	ErrCorrupt   = errors.New("snapshot corrupt") // bad checksum, or bytes after it
	ErrVersion   = errors.New("snapshot version unknown")
	// ErrForeign: not a snapshot (magic), or of another identity
	// configuration (fingerprint).
	ErrForeign = errors.New("snapshot foreign")
)

// Meta describes a snapshot.
type Meta struct {
	Window    int64 // of the writing cache, ns; restoring clamps to its own
	WrittenAt int64 // unix ns
	// Fingerprint, computed by the caller, identifies the configuration its
	// digests were made under.
	Fingerprint uint64
}

// encodedLen is the size of a snapshot of n entries.
func encodedLen(n int) int { return headerLen + entryLen*n + checksumLen }

// appendEncode appends a snapshot of the entries (digest, expiry) each passes
// on, in order.
func appendEncode(dst []byte, meta Meta, each func(func(d digest.Digest, expires int64))) []byte {
	start := len(dst)
	dst = append(dst, magic...)
	dst = binary.BigEndian.AppendUint16(dst, Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(meta.Window))
	dst = binary.BigEndian.AppendUint64(dst, uint64(meta.WrittenAt))
	dst = binary.BigEndian.AppendUint64(dst, meta.Fingerprint)
	dst = binary.BigEndian.AppendUint64(dst, 0) // the count, set at the end
	var n uint64
	each(func(d digest.Digest, expires int64) {
		dst = d.AppendBinary(dst)
		dst = binary.BigEndian.AppendUint64(dst, uint64(expires))
		n++
	})
	binary.BigEndian.PutUint64(dst[start+countOffset:], n)
	return binary.BigEndian.AppendUint64(dst, xxh3.Hash(dst[start:]))
}

// parse validates any input, trusting no count, and returns its Meta and
// entries region.
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
	// By division, so that no claimed count can overflow.
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

// entryAt and expiryAt read entry i of a validated entries region.
func entryAt(entries []byte, i int) (digest.Digest, int64) {
	e := entries[i*entryLen : (i+1)*entryLen]
	return digest.Digest{Hi: binary.BigEndian.Uint64(e), Lo: binary.BigEndian.Uint64(e[8:])},
		int64(binary.BigEndian.Uint64(e[16:]))
}

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
