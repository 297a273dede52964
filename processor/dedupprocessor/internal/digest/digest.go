// Package digest defines a record's 128-bit identity; only digests are
// stored: they reveal nothing.
package digest

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// Size is the number of bytes in a digest.
const Size = 16

// Digest is the 128-bit hash of an identity; collisions (~n²/2¹²⁹) are
// negligible at any volume.
type Digest struct {
	Hi, Lo uint64
}

// Of hashes a canonical identity encoding.
func Of(b []byte) Digest {
	h := xxh3.Hash128(b)
	return Digest{Hi: h.Hi, Lo: h.Lo}
}

// Bytes returns the big-endian 16-byte form.
func (d Digest) Bytes() [Size]byte {
	var b [Size]byte
	binary.BigEndian.PutUint64(b[:8], d.Hi)
	binary.BigEndian.PutUint64(b[8:], d.Lo)
	return b
}

// AppendBinary appends the 16-byte form to dst.
func (d Digest) AppendBinary(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, d.Hi)
	return binary.BigEndian.AppendUint64(dst, d.Lo)
}

// FromBytes is the inverse of Bytes.
func FromBytes(b [Size]byte) Digest {
	return Digest{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
}

// Compare orders digests by Hi, then Lo.
func (d Digest) Compare(o Digest) int {
	return cmp.Or(cmp.Compare(d.Hi, o.Hi), cmp.Compare(d.Lo, o.Lo))
}

// String returns the 32-character lowercase hex form.
func (d Digest) String() string {
	b := d.Bytes()
	return hex.EncodeToString(b[:])
}
