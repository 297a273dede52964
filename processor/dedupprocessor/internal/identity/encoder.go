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
	"math/bits"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Type tags of the encoding: part of every digest, so fixed once released.
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

const (
	// maxRetainedBuffer bounds the buffer kept between records: a huge one is
	// not pinned.
	maxRetainedBuffer = 64 << 10
	initialBuffer     = 1024
)

// Encoder accumulates the canonical encoding of one identity; the zero value is
// ready, not for concurrent use. It writes into buf up to n, replacing buf only
// when too small: pooled Encoders are on the heap, where storing a slice header
// per append costs a GC write barrier, an int none.
type Encoder struct {
	buf []byte // len(buf) is its capacity
	n   int
}

// Reset starts a new identity.
func (e *Encoder) Reset() {
	if len(e.buf) > maxRetainedBuffer {
		e.buf = nil
	}
	e.n = 0
}

// encoded returns what was encoded since the last Reset, until the next change.
func (e *Encoder) encoded() []byte { return e.buf[:e.n] }

// Digest hashes what was encoded since the last Reset.
func (e *Encoder) Digest() digest.Digest { return digest.Of(e.encoded()) }

// room reserves k more bytes and returns them to be written.
func (e *Encoder) room(k int) []byte {
	n := e.n
	if n+k > len(e.buf) {
		e.grow(k)
	}
	e.n = n + k
	return e.buf[n : n+k]
}

func (e *Encoder) grow(k int) {
	grown := make([]byte, max(initialBuffer, 2*len(e.buf), e.n+k))
	copy(grown, e.buf[:e.n])
	e.buf = grown
}

// uvarintLen is the length of binary.PutUvarint's encoding of v: 7 bits a byte.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// header writes tag and n as a uvarint, and reserves k more bytes to write.
func (e *Encoder) header(tag byte, n uint64, k int) []byte {
	ln := uvarintLen(n)
	w := e.room(1 + ln + k)
	w[0] = tag
	binary.PutUvarint(w[1:], n)
	return w[1+ln:]
}

// putTagged writes tag, then the length of b as a uvarint, then b.
func putTagged[T string | []byte](e *Encoder, tag byte, b T) {
	copy(e.header(tag, uint64(len(b)), len(b)), b)
}

// putTaggedString is putTagged with a short path for one-byte lengths.
func (e *Encoder) putTaggedString(tag byte, s string) {
	if len(s) < 0x80 { // a one-byte uvarint
		putShort(e.room(2+len(s)), tag, s)
		return
	}
	putTagged(e, tag, s)
}

// putShort writes putTagged's encoding of s, shorter than 0x80 bytes, at the
// start of w, and returns the rest of w.
func putShort(w []byte, tag byte, s string) []byte {
	w[0], w[1] = tag, byte(len(s))
	copy(w[2:], s)
	return w[2+len(s):]
}

func (e *Encoder) put64(tag byte, v uint64) {
	w := e.room(9)
	w[0] = tag
	binary.BigEndian.PutUint64(w[1:], v)
}

// Field starts a named part of a content identity: equal values in different
// fields differ.
func (e *Encoder) Field(id byte) {
	w := e.room(2)
	w[0], w[1] = tagField, id
}

// FieldValue is Field(id) then valueOrMissing(v); Field* write in one
// reservation (a dozen per record).
func (e *Encoder) FieldValue(id byte, v pcommon.Value) {
	if v.Type() == pcommon.ValueTypeStr {
		e.FieldString(id, v.Str())
		return
	}
	e.Field(id)
	e.valueOrMissing(v)
}

// FieldString is Field(id) then String(s).
func (e *Encoder) FieldString(id byte, s string) {
	if len(s) < 0x80 {
		w := e.room(4 + len(s))
		w[0], w[1] = tagField, id
		putShort(w[2:], tagString, s)
		return
	}
	e.Field(id)
	putTagged(e, tagString, s)
}

// FieldInt is Field(id) then Int(v).
func (e *Encoder) FieldInt(id byte, v int64) { e.field64(id, tagInt, uint64(v)) }

// FieldUint is Field(id) then Uint(v).
func (e *Encoder) FieldUint(id byte, v uint64) { e.field64(id, tagUint, v) }

func (e *Encoder) field64(id, tag byte, v uint64) {
	w := e.room(11)
	w[0], w[1], w[2] = tagField, id, tag
	binary.BigEndian.PutUint64(w[3:], v)
}

// FieldIDs is Field(traceField) then TraceID(t), then Field(spanField) then
// SpanID(s).
func (e *Encoder) FieldIDs(traceField byte, t pcommon.TraceID, spanField byte, s pcommon.SpanID) {
	w := e.room(2 + 1 + len(t) + 2 + 1 + len(s))
	w[0], w[1], w[2] = tagField, traceField, tagTraceID
	copy(w[3:3+len(t)], t[:])
	w = w[3+len(t):]
	w[0], w[1], w[2] = tagField, spanField, tagSpanID
	copy(w[3:], s[:])
}

// Raw appends opaque bytes that are already canonical (e.g. a domain tag).
func (e *Encoder) Raw(b []byte) {
	ln := uvarintLen(uint64(len(b)))
	w := e.room(ln + len(b))
	binary.PutUvarint(w[:ln], uint64(len(b)))
	copy(w[ln:], b)
}

func (e *Encoder) missing() { e.room(1)[0] = tagMissing }

// String encodes a string.
func (e *Encoder) String(s string) { e.putTaggedString(tagString, s) }

// Int encodes a signed integer.
func (e *Encoder) Int(v int64) { e.put64(tagInt, uint64(v)) }

// Uint encodes an unsigned integer (timestamps, flags, counts).
func (e *Encoder) Uint(v uint64) { e.put64(tagUint, v) }

// double encodes a float by its bits; -0 and +0 are made equal.
func (e *Encoder) double(v float64) {
	if v == 0 {
		v = 0
	}
	e.put64(tagDouble, math.Float64bits(v))
}

// Bool encodes a boolean.
func (e *Encoder) Bool(v bool) {
	w := e.room(2)
	w[0], w[1] = tagBool, 0
	if v {
		w[1] = 1
	}
}

// Bytes encodes a byte string.
func (e *Encoder) Bytes(b []byte) { putTagged(e, tagBytes, b) }

// TraceID encodes a trace ID.
func (e *Encoder) TraceID(id pcommon.TraceID) { e.putFixed(tagTraceID, id[:]) }

// SpanID encodes a span ID.
func (e *Encoder) SpanID(id pcommon.SpanID) { e.putFixed(tagSpanID, id[:]) }

// putFixed writes tag and b, whose length the tag implies.
func (e *Encoder) putFixed(tag byte, b []byte) {
	w := e.room(1 + len(b))
	w[0] = tag
	copy(w[1:], b)
}

// Value encodes a pdata value as Any does the same Go value (so plain and OTTL
// paths agree), or returns false, encoding nothing, when it is empty.
func (e *Encoder) Value(v pcommon.Value) bool {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		e.String(v.Str())
	case pcommon.ValueTypeInt:
		e.Int(v.Int())
	case pcommon.ValueTypeDouble:
		e.double(v.Double())
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

func (e *Encoder) valueOrMissing(v pcommon.Value) {
	if !e.Value(v) {
		e.missing()
	}
}

// maxSortedEntries is the largest map encoded with its entries sorted.
const maxSortedEntries = 8

// Map encodes a map whatever its entry order, leaving out the keys skip names:
// sorted if at most maxSortedEntries distinct keys, else as the sum of its
// entries' hashes. Each form has its tag: equal maps encode alike.
func (e *Encoder) Map(m pcommon.Map, skip func(key string) bool) {
	if (m.Len() <= maxSortedEntries || skip != nil) && e.sortedMap(m, skip) {
		return
	}
	e.hashedMap(m, skip)
}

// sortedMap encodes m in key order (insertion sort), or returns false,
// encoding nothing, if it cannot.
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
	w := e.room(2)
	w[0], w[1] = tagSmallMap, byte(n)
	for i := range n {
		e.entry(keys[i], vals[i])
	}
	return true
}

// entry is String(k) then valueOrMissing(v), in one write for short keys and
// values.
func (e *Encoder) entry(k string, v pcommon.Value) {
	if len(k) < 0x80 {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			if s := v.Str(); len(s) < 0x80 {
				w := putShort(e.room(4+len(k)+len(s)), tagString, k)
				putShort(w, tagString, s)
				return
			}
		case pcommon.ValueTypeInt:
			w := putShort(e.room(2+len(k)+9), tagString, k)
			w[0] = tagInt
			binary.BigEndian.PutUint64(w[1:9], uint64(v.Int()))
			return
		}
	}
	e.String(k)
	e.valueOrMissing(v)
}

// hashedMap sums the entries' 128-bit hashes: commutative, and repeated
// entries still count.
func (e *Encoder) hashedMap(m pcommon.Map, skip func(key string) bool) {
	var accHi, accLo uint64
	n := 0
	start := e.n
	for k, v := range m.All() {
		if skip != nil && skip(k) {
			continue
		}
		n++
		e.String(k)
		e.valueOrMissing(v)
		d := digest.Of(e.encoded()[start:])
		e.n = start
		var carry uint64
		accLo, carry = bits.Add64(accLo, d.Lo, 0)
		accHi += d.Hi + carry
	}
	w := e.header(tagMap, uint64(n), 16)
	binary.BigEndian.PutUint64(w, accHi)
	binary.BigEndian.PutUint64(w[8:], accLo)
}

// Slice encodes a list in order.
func (e *Encoder) Slice(s pcommon.Slice) {
	e.header(tagSlice, uint64(s.Len()), 0)
	for i := 0; i < s.Len(); i++ {
		e.valueOrMissing(s.At(i))
	}
}

// Any encodes a value an OTTL expression returned; false, encoding nothing,
// for nil and unset IDs.
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
		e.double(t)
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
		e.put64(tagTime, uint64(t.UnixNano()))
	case time.Duration:
		e.put64(tagDuration, uint64(t))
	case pcommon.Timestamp:
		e.Uint(uint64(t))
	case map[string]any, []any:
		pv := pcommon.NewValueEmpty()
		if err := pv.FromRaw(t); err != nil {
			e.other(t)
			break
		}
		e.Value(pv)
	default:
		e.other(t)
	}
	return true
}

// other encodes types with no canonical form: %T keeps types apart, %#v
// values. Rare: may allocate.
func (e *Encoder) other(v any) {
	e.putTaggedString(tagOther, fmt.Sprintf("%T\x00%#v", v, v))
}
