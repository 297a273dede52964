package identity

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func digestOf(fn func(e *Encoder)) digest.Digest {
	var e Encoder
	fn(&e)
	return e.Digest()
}

func TestEncodingKeepsValuesApart(t *testing.T) {
	cases := map[string]func(e *Encoder){
		`string "1"`: func(e *Encoder) { e.String("1") },
		`int 1`:      func(e *Encoder) { e.Int(1) },
		`double 1`:   func(e *Encoder) { e.double(1) },
		`uint 1`:     func(e *Encoder) { e.Uint(1) },
		`bool true`:  func(e *Encoder) { e.Bool(true) },
		`bytes "1"`:  func(e *Encoder) { e.Bytes([]byte("1")) },
		`empty str`:  func(e *Encoder) { e.String("") },
		`missing`:    func(e *Encoder) { e.missing() },
		`"ab","c"`:   func(e *Encoder) { e.String("ab"); e.String("c") },
		`"a","bc"`:   func(e *Encoder) { e.String("a"); e.String("bc") },
		`empty map`:  func(e *Encoder) { e.Map(pcommon.NewMap(), nil) },
		`empty slice`: func(e *Encoder) {
			e.Slice(pcommon.NewSlice())
		},
		`map{a:1}`: func(e *Encoder) {
			m := pcommon.NewMap()
			m.PutInt("a", 1)
			e.Map(m, nil)
		},
		`map{a:"1"}`: func(e *Encoder) {
			m := pcommon.NewMap()
			m.PutStr("a", "1")
			e.Map(m, nil)
		},
		`slice[1,2]`: func(e *Encoder) {
			s := pcommon.NewSlice()
			s.AppendEmpty().SetInt(1)
			s.AppendEmpty().SetInt(2)
			e.Slice(s)
		},
		`slice[2,1]`: func(e *Encoder) {
			s := pcommon.NewSlice()
			s.AppendEmpty().SetInt(2)
			s.AppendEmpty().SetInt(1)
			e.Slice(s)
		},
		`trace id`: func(e *Encoder) { e.TraceID(pcommon.TraceID{1}) },
		`span id`:  func(e *Encoder) { e.SpanID(pcommon.SpanID{1}) },
		`field 1`:  func(e *Encoder) { e.Field(1) },
		`field 2`:  func(e *Encoder) { e.Field(2) },
	}
	seen := map[digest.Digest]string{}
	for name, fn := range cases {
		dg := digestOf(fn)
		if other, dup := seen[dg]; dup {
			t.Errorf("%s and %s encode alike", name, other)
		}
		seen[dg] = name
	}
	if len(seen) != len(cases) {
		t.Fatalf("%d distinct digests for %d cases", len(seen), len(cases))
	}
}

func TestMapOrderDoesNotMatterButContentDoes(t *testing.T) {
	a := pcommon.NewMap()
	a.PutStr("x", "1")
	a.PutInt("y", 2)
	a.PutEmptyMap("z").PutStr("k", "v")
	b := pcommon.NewMap()
	b.PutEmptyMap("z").PutStr("k", "v")
	b.PutInt("y", 2)
	b.PutStr("x", "1")
	da := digestOf(func(e *Encoder) { e.Map(a, nil) })
	db := digestOf(func(e *Encoder) { e.Map(b, nil) })
	if da != db {
		t.Fatal("maps with the same entries in another order differ")
	}
	b.PutStr("x", "2")
	if digestOf(func(e *Encoder) { e.Map(b, nil) }) == da {
		t.Fatal("maps with different values encode alike")
	}
	// Skipping a key is the same as not having it.
	b.PutStr("x", "1")
	b.PutStr("received_at", "now")
	skip := func(k string) bool { return k == "received_at" }
	if digestOf(func(e *Encoder) { e.Map(b, skip) }) != da {
		t.Fatal("a skipped key changed the digest")
	}
}

// TestMapFormsDependOnContentOnly covers both encodings of a map: sorted
// (up to maxSortedEntries distinct keys) and hashed (more entries, or a
// repeated key). Order never matters, and the form is chosen by the entries
// left after skip, so a skipped key never changes the form.
func TestMapFormsDependOnContentOnly(t *testing.T) {
	build := func(n int, reverse bool, extra ...string) pcommon.Map {
		m := pcommon.NewMap()
		for i := range n {
			k := i
			if reverse {
				k = n - 1 - i
			}
			m.PutInt(fmt.Sprintf("k%02d", k), int64(k))
		}
		for _, x := range extra {
			m.PutStr(x, "skipped")
		}
		return m
	}
	for _, n := range []int{0, 1, 2, maxSortedEntries, maxSortedEntries + 1, 20} {
		fwd := digestOf(func(e *Encoder) { e.Map(build(n, false), nil) })
		rev := digestOf(func(e *Encoder) { e.Map(build(n, true), nil) })
		if fwd != rev {
			t.Errorf("%d entries: order changed the digest", n)
		}
		skip := func(k string) bool { return k == "a" || k == "b" || k == "c" }
		if got := digestOf(func(e *Encoder) { e.Map(build(n, true, "a", "b", "c"), skip) }); got != fwd {
			t.Errorf("%d entries: skipping 3 extra keys changed the digest", n)
		}
		if n > 0 {
			other := build(n, false)
			other.PutInt("k00", 99)
			if digestOf(func(e *Encoder) { e.Map(other, nil) }) == fwd {
				t.Errorf("%d entries: a changed value kept the digest", n)
			}
		}
	}
	// A repeated key (not valid OTLP, but possible in pdata) takes the hashed
	// form, still independent of order and still counting each entry.
	a := rawMap(t, "x", "1", "x", "2", "y", "3")
	b := rawMap(t, "y", "3", "x", "2", "x", "1")
	if digestOf(func(e *Encoder) { e.Map(a, nil) }) != digestOf(func(e *Encoder) { e.Map(b, nil) }) {
		t.Error("a map with a repeated key: order changed the digest")
	}
	for _, other := range []pcommon.Map{rawMap(t, "x", "1", "y", "3"), rawMap(t, "x", "2", "y", "3"), rawMap(t, "x", "1", "x", "1", "y", "3")} {
		if digestOf(func(e *Encoder) { e.Map(a, nil) }) == digestOf(func(e *Encoder) { e.Map(other, nil) }) {
			t.Errorf("%v encodes like %v", a.AsRaw(), other.AsRaw())
		}
	}
}

// rawMap builds a map entry by entry as a decoded OTLP request would, so a
// key may repeat (pdata's Put methods would replace it).
func rawMap(t *testing.T, kv ...string) pcommon.Map {
	t.Helper()
	var attrs []string
	for i := 0; i < len(kv); i += 2 {
		attrs = append(attrs, fmt.Sprintf(`{"key":%q,"value":{"stringValue":%q}}`, kv[i], kv[i+1]))
	}
	js := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":[` + strings.Join(attrs, ",") + `]}]}]}]}`
	ld, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	m := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
	if m.Len() != len(kv)/2 {
		t.Fatalf("decoded %d entries, want %d", m.Len(), len(kv)/2)
	}
	return m
}

// TestAnyMatchesValue is the promise the fast path rests on: a pdata value
// and the Go value OTTL returns for it encode alike.
func TestAnyMatchesValue(t *testing.T) {
	m := pcommon.NewMap()
	m.PutStr("s", "hello")
	m.PutInt("i", -3)
	m.PutDouble("d", 2.5)
	m.PutBool("b", true)
	m.PutEmptyBytes("y").FromRaw([]byte{0, 1, 2})
	m.PutEmptyMap("m").PutStr("k", "v")
	m.PutEmptySlice("l").AppendEmpty().SetStr("e")
	goValues := map[string]any{
		"s": "hello", "i": int64(-3), "d": 2.5, "b": true, "y": []byte{0, 1, 2},
	}
	for k, v := range m.All() {
		want := digestOf(func(e *Encoder) { e.Value(v) })
		var got digest.Digest
		switch v.Type() {
		case pcommon.ValueTypeMap:
			got = digestOf(func(e *Encoder) { e.Any(v.Map()) })
		case pcommon.ValueTypeSlice:
			got = digestOf(func(e *Encoder) { e.Any(v.Slice()) })
		default:
			got = digestOf(func(e *Encoder) { e.Any(goValues[k]) })
		}
		if got != want {
			t.Errorf("%s: Any and Value differ", k)
		}
	}
	if digestOf(func(e *Encoder) { e.Any(map[string]any{"k": "v"}) }) != digestOf(func(e *Encoder) { e.Map(mapOf("k", "v"), nil) }) {
		t.Error("map[string]any and pcommon.Map differ")
	}
}

func mapOf(k, v string) pcommon.Map {
	m := pcommon.NewMap()
	m.PutStr(k, v)
	return m
}

func TestAnyMissing(t *testing.T) {
	var e Encoder
	for _, v := range []any{nil, pcommon.TraceID{}, pcommon.SpanID{}, pcommon.NewValueEmpty()} {
		if e.Any(v) {
			t.Errorf("Any(%#v) = true, want false (missing)", v)
		}
	}
	if len(e.encoded()) != 0 {
		t.Fatalf("missing values encoded %d bytes", len(e.encoded()))
	}
	for _, v := range []any{"", int64(0), false, time.Unix(0, 0), time.Duration(0), []any{"a"}, struct{ A int }{1}} {
		if !e.Any(v) {
			t.Errorf("Any(%#v) = false, want true", v)
		}
	}
}

func TestResetDropsHugeBuffers(t *testing.T) {
	var e Encoder
	e.String(string(make([]byte, 1<<20)))
	e.Reset()
	if len(e.buf) > maxRetainedBuffer {
		t.Fatalf("kept a %d-byte buffer after Reset", len(e.buf))
	}
}

func FuzzEncodingIsInjective(f *testing.F) {
	f.Add("a", "bc", int64(1), "1")
	f.Add("ab", "c", int64(0), "")
	f.Add("", "", int64(-1), "\xff")
	f.Fuzz(func(t *testing.T, a, b string, i int64, s string) {
		// Two different splits of the same bytes never collide.
		d1 := digestOf(func(e *Encoder) { e.String(a); e.String(b) })
		d2 := digestOf(func(e *Encoder) { e.String(a + b); e.String("") })
		if b != "" && d1 == d2 {
			t.Fatalf("(%q,%q) collides with (%q,\"\")", a, b, a+b)
		}
		// A string never encodes like an int.
		if digestOf(func(e *Encoder) { e.String(s) }) == digestOf(func(e *Encoder) { e.Int(i) }) {
			t.Fatalf("string %q collides with int %d", s, i)
		}
		// Value and Any agree on strings, including invalid UTF-8.
		v := pcommon.NewValueStr(s)
		if digestOf(func(e *Encoder) { e.Value(v) }) != digestOf(func(e *Encoder) { e.Any(s) }) {
			t.Fatalf("Value and Any differ for %q", s)
		}
	})
}

// TestEncodingAcrossTheInPlaceBuffer checks the bytes of encodings that
// start in the Encoder's in-place array and outgrow it, and of the small
// encodings that follow a large one, against the format written out by
// hand: tag, uvarint length, bytes.
func TestEncodingAcrossTheInPlaceBuffer(t *testing.T) {
	str := func(s string) []byte {
		b := []byte{tagString}
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	var e Encoder
	for _, n := range []int{0, 1, 127, 128, initialBuffer - 20, initialBuffer - 6, initialBuffer - 5, initialBuffer, 3 * initialBuffer, 5, 70 << 10, 9} {
		head := strings.Repeat("h", n)
		e.Reset()
		e.String(head)
		e.String("tail")
		e.Uint(7)
		want := append(append(str(head), str("tail")...), tagUint, 0, 0, 0, 0, 0, 0, 0, 7)
		if !bytes.Equal(e.encoded(), want) {
			t.Fatalf("head of %d bytes: encoded %d bytes, want %d (first difference at %d)", n, len(e.encoded()), len(want), firstDiff(e.encoded(), want))
		}
		if e.Digest() != digest.Of(want) {
			t.Fatalf("head of %d bytes: digest differs from the digest of the bytes", n)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestOneWriteFormsEncodeAsTheirParts: each Field* method and the map entry
// writer produce exactly the bytes of the calls they stand for, for short
// and long strings, so using them changes no digest.
func TestOneWriteFormsEncodeAsTheirParts(t *testing.T) {
	long := strings.Repeat("x", 200)
	encoded := func(fn func(e *Encoder)) []byte {
		var e Encoder
		e.Raw([]byte("prefix"))
		fn(&e)
		return bytes.Clone(e.encoded())
	}
	tid := pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sid := pcommon.SpanID{9, 8, 7, 6, 5, 4, 3, 2}
	values := map[string]func() pcommon.Value{
		"short string": func() pcommon.Value { return pcommon.NewValueStr("GET") },
		"long string":  func() pcommon.Value { return pcommon.NewValueStr(long) },
		"empty string": func() pcommon.Value { return pcommon.NewValueStr("") },
		"int":          func() pcommon.Value { return pcommon.NewValueInt(-42) },
		"double":       func() pcommon.Value { return pcommon.NewValueDouble(1.5) },
		"empty":        pcommon.NewValueEmpty,
		"map": func() pcommon.Value {
			v := pcommon.NewValueMap()
			v.Map().PutStr("a", "b")
			return v
		},
	}
	for name, v := range values {
		if a, b := encoded(func(e *Encoder) { e.FieldValue(7, v()) }), encoded(func(e *Encoder) { e.Field(7); e.valueOrMissing(v()) }); !bytes.Equal(a, b) {
			t.Errorf("FieldValue(%s) = %x, want %x", name, a, b)
		}
		for _, k := range []string{"k", long} {
			if a, b := encoded(func(e *Encoder) { e.entry(k, v()) }), encoded(func(e *Encoder) { e.String(k); e.valueOrMissing(v()) }); !bytes.Equal(a, b) {
				t.Errorf("entry(%d-byte key, %s) = %x, want %x", len(k), name, a, b)
			}
		}
	}
	for _, s := range []string{"", "WARN", long} {
		if a, b := encoded(func(e *Encoder) { e.FieldString(3, s) }), encoded(func(e *Encoder) { e.Field(3); e.String(s) }); !bytes.Equal(a, b) {
			t.Errorf("FieldString(%d bytes) = %x, want %x", len(s), a, b)
		}
	}
	if a, b := encoded(func(e *Encoder) { e.FieldInt(4, -7) }), encoded(func(e *Encoder) { e.Field(4); e.Int(-7) }); !bytes.Equal(a, b) {
		t.Errorf("FieldInt = %x, want %x", a, b)
	}
	if a, b := encoded(func(e *Encoder) { e.FieldUint(5, 1<<63+9) }), encoded(func(e *Encoder) { e.Field(5); e.Uint(1<<63 + 9) }); !bytes.Equal(a, b) {
		t.Errorf("FieldUint = %x, want %x", a, b)
	}
	if a, b := encoded(func(e *Encoder) { e.FieldIDs(10, tid, 11, sid) }), encoded(func(e *Encoder) { e.Field(10); e.TraceID(tid); e.Field(11); e.SpanID(sid) }); !bytes.Equal(a, b) {
		t.Errorf("FieldIDs = %x, want %x", a, b)
	}
}
