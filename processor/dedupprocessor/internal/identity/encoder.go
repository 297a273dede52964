// Package identity turns record fields into a canonical, type-aware byte
// encoding and hashes it to a digest. The encoding is injective: values of
// different types never encode alike (string "1" differs from int 1), an
// absent value differs from an empty one, and every variable-length part is
// length-prefixed so that ("ab","c") differs from ("a","bc"). Map entries are
// combined order-independently, since OTLP attribute order carries no meaning.
package identity

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Type tags of the encoding. They are part of every digest: changing one
// changes every identity, so they are fixed once released.
const (
	tagMissing  = 0x00
	tagString   = 0x01
	tagInt      = 0x02
	tagDouble   = 0x03
	tagBool     = 0x04
	tagBytes    = 0x05
	tagMap      = 0x06
	tagSlice    = 0x07
	tagTraceID  = 0x08
	tagSpanID   = 0x09
	tagTime     = 0x0a
	tagDuration = 0x0b
	tagUint     = 0x0c
	tagOther    = 0x0d
	tagSmallMap = 0x0e
	tagField    = 0x10
)

// maxRetainedBuffer bounds the buffer an Encoder keeps between records, so a
// single huge record does not pin its memory for the life of a pool entry.
const maxRetainedBuffer = 64 << 10

// Encoder accumulates the canonical encoding of one identity. The zero value
// is ready to use. An Encoder is not safe for concurrent use; pool them.
type Encoder struct {
	buf []byte
}

// Reset starts a new identity.
func (e *Encoder) Reset() {
	if cap(e.buf) > maxRetainedBuffer {
		e.buf = nil
	}
	e.buf = e.buf[:0]
}

// Len is the number of bytes encoded so far.
func (e *Encoder) Len() int { return len(e.buf) }

// Digest hashes what was encoded since the last Reset.
func (e *Encoder) Digest() digest.Digest { return digest.Of(e.buf) }

// Field starts a named part of a content identity, so that two fields with
// the same value in different places never encode alike.
func (e *Encoder) Field(id byte) {
	e.buf = append(e.buf, tagField, id)
}

// Raw appends opaque bytes that are already canonical (e.g. a domain tag).
func (e *Encoder) Raw(b []byte) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(b)))
	e.buf = append(e.buf, b...)
}

// Missing encodes an absent value.
func (e *Encoder) Missing() { e.buf = append(e.buf, tagMissing) }

// String encodes a string.
func (e *Encoder) String(s string) {
	e.buf = append(e.buf, tagString)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// Int encodes a signed integer.
func (e *Encoder) Int(v int64) {
	e.buf = append(e.buf, tagInt)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v))
}

// Uint encodes an unsigned integer (timestamps, flags, counts).
func (e *Encoder) Uint(v uint64) {
	e.buf = append(e.buf, tagUint)
	e.buf = binary.BigEndian.AppendUint64(e.buf, v)
}

// Double encodes a float by its bits; -0 and +0 are made equal.
func (e *Encoder) Double(v float64) {
	if v == 0 {
		v = 0
	}
	e.buf = append(e.buf, tagDouble)
	e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(v))
}

// Bool encodes a boolean.
func (e *Encoder) Bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	e.buf = append(e.buf, tagBool, b)
}

// Bytes encodes a byte string.
func (e *Encoder) Bytes(b []byte) {
	e.buf = append(e.buf, tagBytes)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(b)))
	e.buf = append(e.buf, b...)
}

// TraceID encodes a trace ID.
func (e *Encoder) TraceID(id pcommon.TraceID) {
	e.buf = append(e.buf, tagTraceID)
	e.buf = append(e.buf, id[:]...)
}

// SpanID encodes a span ID.
func (e *Encoder) SpanID(id pcommon.SpanID) {
	e.buf = append(e.buf, tagSpanID)
	e.buf = append(e.buf, id[:]...)
}

// Value encodes a pdata value. It returns false, encoding nothing, when the
// value is empty (absent), so callers can apply their missing-key policy.
// A string, int, ... value encodes exactly as the same Go value passed to Any,
// so a fast-path key and its OTTL form produce the same digest.
func (e *Encoder) Value(v pcommon.Value) bool {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		e.String(v.Str())
	case pcommon.ValueTypeInt:
		e.Int(v.Int())
	case pcommon.ValueTypeDouble:
		e.Double(v.Double())
	case pcommon.ValueTypeBool:
		e.Bool(v.Bool())
	case pcommon.ValueTypeBytes:
		e.Bytes(v.Bytes().AsRaw())
	case pcommon.ValueTypeMap:
		e.Map(v.Map(), nil)
	case pcommon.ValueTypeSlice:
		e.Slice(v.Slice())
	default:
		return false
	}
	return true
}

// ValueOrMissing encodes v, or the missing marker when v is empty.
func (e *Encoder) ValueOrMissing(v pcommon.Value) {
	if !e.Value(v) {
		e.Missing()
	}
}

// maxSortedEntries is the largest map encoded with its entries sorted.
const maxSortedEntries = 8

// Map encodes a map independently of its entry order. skip, when not nil,
// leaves keys out. A map of at most maxSortedEntries entries with distinct
// keys, as nearly every record's attributes are, is encoded with its entries
// in key order; a larger one, or one with a repeated key, as the sum of its
// entries' hashes. Which form a map takes depends only on its entries, and
// the two forms have their own tags, so equal maps always encode alike.
func (e *Encoder) Map(m pcommon.Map, skip func(key string) bool) {
	if m.Len() <= maxSortedEntries || skip != nil {
		if e.sortedMap(m, skip) {
			return
		}
	}
	e.hashedMap(m, skip)
}

// sortedMap encodes m with its entries in key order, sorted by insertion
// into arrays on the stack. It encodes nothing and returns false when m has
// more than maxSortedEntries entries left after skip, or a repeated key.
func (e *Encoder) sortedMap(m pcommon.Map, skip func(key string) bool) bool {
	var keys [maxSortedEntries]string
	var vals [maxSortedEntries]pcommon.Value
	n := 0
	for k, v := range m.All() {
		if skip != nil && skip(k) {
			continue
		}
		if n == maxSortedEntries {
			return false
		}
		j := n
		for j > 0 && keys[j-1] > k {
			keys[j], vals[j] = keys[j-1], vals[j-1]
			j--
		}
		if j > 0 && keys[j-1] == k {
			return false
		}
		keys[j], vals[j] = k, v
		n++
	}
	e.buf = append(e.buf, tagSmallMap, byte(n))
	for i := range n {
		e.String(keys[i])
		e.ValueOrMissing(vals[i])
	}
	return true
}

// hashedMap hashes each entry on its own and sums the 128-bit hashes, a
// commutative combination that still counts repeated entries.
func (e *Encoder) hashedMap(m pcommon.Map, skip func(key string) bool) {
	var accHi, accLo uint64
	n := 0
	start := len(e.buf)
	for k, v := range m.All() {
		if skip != nil && skip(k) {
			continue
		}
		n++
		e.String(k)
		e.ValueOrMissing(v)
		d := digest.Of(e.buf[start:])
		e.buf = e.buf[:start]
		var carry uint64
		accLo, carry = addCarry(accLo, d.Lo)
		accHi += d.Hi + carry
	}
	e.buf = append(e.buf, tagMap)
	e.buf = binary.AppendUvarint(e.buf, uint64(n))
	e.buf = binary.BigEndian.AppendUint64(e.buf, accHi)
	e.buf = binary.BigEndian.AppendUint64(e.buf, accLo)
}

func addCarry(a, b uint64) (uint64, uint64) {
	s := a + b
	if s < a {
		return s, 1
	}
	return s, 0
}

// Slice encodes a list in order.
func (e *Encoder) Slice(s pcommon.Slice) {
	e.buf = append(e.buf, tagSlice)
	e.buf = binary.AppendUvarint(e.buf, uint64(s.Len()))
	for i := 0; i < s.Len(); i++ {
		e.ValueOrMissing(s.At(i))
	}
}

// Any encodes a value returned by an OTTL expression. It returns false,
// encoding nothing, for nil (OTTL's "no value") and for all-zero trace and
// span IDs, which OTLP uses to mean "not set".
func (e *Encoder) Any(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case string:
		e.String(t)
	case int64:
		e.Int(t)
	case int:
		e.Int(int64(t))
	case float64:
		e.Double(t)
	case bool:
		e.Bool(t)
	case []byte:
		e.Bytes(t)
	case pcommon.Value:
		return e.Value(t)
	case pcommon.Map:
		e.Map(t, nil)
	case pcommon.Slice:
		e.Slice(t)
	case pcommon.TraceID:
		if t.IsEmpty() {
			return false
		}
		e.TraceID(t)
	case pcommon.SpanID:
		if t.IsEmpty() {
			return false
		}
		e.SpanID(t)
	case time.Time:
		e.buf = append(e.buf, tagTime)
		e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(t.UnixNano()))
	case time.Duration:
		e.buf = append(e.buf, tagDuration)
		e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(t))
	case pcommon.Timestamp:
		e.Uint(uint64(t))
	case map[string]any:
		m := pcommon.NewMap()
		if err := m.FromRaw(t); err != nil {
			e.other(t)
			break
		}
		e.Map(m, nil)
	case []any:
		s := pcommon.NewSlice()
		if err := s.FromRaw(t); err != nil {
			e.other(t)
			break
		}
		e.Slice(s)
	default:
		e.other(t)
	}
	return true
}

// other encodes a type the converters may return that has no canonical form
// above; %T keeps types apart, %#v the values. Rare, so it may allocate.
func (e *Encoder) other(v any) {
	s := fmt.Sprintf("%T\x00%#v", v, v)
	e.buf = append(e.buf, tagOther)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}
