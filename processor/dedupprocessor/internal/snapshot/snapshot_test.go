package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	window = int64(10 * time.Minute)
	t0     = int64(1_700_000_000_000_000_000) // unix ns
	fp     = uint64(0x0123456789abcdef)
)

type entry struct {
	d       digest.Digest
	expires int64
}

func key(i int) digest.Digest { return digest.Of(binary.BigEndian.AppendUint64(nil, uint64(i))) }

func seq(es []entry) func(func(digest.Digest, int64)) {
	return func(fn func(digest.Digest, int64)) {
		for _, e := range es {
			fn(e.d, e.expires)
		}
	}
}

func encode(meta Meta, es ...entry) []byte { return appendEncode(nil, meta, seq(es)) }

func decodeAll(b []byte, fingerprint uint64, window, now int64) ([]entry, Meta, int, error) {
	var got []entry
	meta, n, err := decode(b, fingerprint, window, now, func(d digest.Digest, expires int64) {
		got = append(got, entry{d, expires})
	})
	return got, meta, n, err
}

// small is a snapshot of three live entries, used where every byte of it is
// mutated.
func small() []byte {
	return encode(Meta{Window: window, WrittenAt: t0, Fingerprint: fp},
		entry{key(1), t0 + 10}, entry{key(2), t0 + 20}, entry{key(3), t0 + 30})
}

// maxOneShard is the largest localcache kept in one shard, where Range
// yields keys in the order they were inserted.
const maxOneShard = 64*1024 - 1

var sentinels = []error{ErrTruncated, ErrCorrupt, ErrVersion, ErrForeign}

// requireRefused checks that b is refused with want (any sentinel if nil) by
// both Decode and Restore, and that neither handed over a single entry.
func requireRefused(t *testing.T, b []byte, want error) {
	t.Helper()
	calls := 0
	meta, n, err := decode(b, fp, window, t0, func(digest.Digest, int64) { calls++ })
	switch {
	case err == nil:
		t.Fatalf("Decode accepted %x", b)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("Decode error %q, want %q", err, want)
	case want == nil && !slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }):
		t.Fatalf("Decode error %q wraps no sentinel", err)
	case calls != 0 || n != 0 || meta != (Meta{}):
		t.Fatalf("Decode failed with %q but called fn %d times, n=%d, meta=%+v", err, calls, n, meta)
	}
	c := localcache.New(16, window)
	if _, restored, rerr := Restore(c, b, fp, window, t0); rerr == nil || restored != 0 || c.Len(t0) != 0 {
		t.Fatalf("Restore: err=%v restored=%d held=%d, want an error and nothing held", rerr, restored, c.Len(t0))
	}
}

// TestLayout pins the format byte by byte: a change here is a new version.
func TestLayout(t *testing.T) {
	d := digest.Digest{Hi: 0x1112131415161718, Lo: 0x2122232425262728}
	b := encode(Meta{Window: 0x0102, WrittenAt: 0x0304, Fingerprint: 0x0506}, entry{d, 0x0708})
	want := "" +
		"4f434444" + // "OCDD"
		"0001" + // version
		"0000000000000102" + // window
		"0000000000000304" + // written at
		"0000000000000506" + // fingerprint
		"0000000000000001" + // count
		"1112131415161718" + "2122232425262728" + "0000000000000708" + // entry
		"568a2451b47228d3" // xxh3-64 of all the above
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("layout:\n got %s\nwant %s", got, want)
	}
	if len(b) != encodedLen(1) || encodedLen(0) != 46 {
		t.Fatalf("encodedLen(1)=%d, len=%d; encodedLen(0)=%d", encodedLen(1), len(b), encodedLen(0))
	}
}

func TestDecodeKeepsOrderSkipsExpiredAndClamps(t *testing.T) {
	now := t0
	meta := Meta{Window: 2 * window, WrittenAt: now - 5, Fingerprint: fp}
	b := encode(meta,
		entry{key(0), now + 5},
		entry{key(1), now}, // expires exactly now: gone
		entry{key(2), now - 1},
		entry{key(3), now + window + 100}, // from a longer window: clamped
		entry{key(4), now + 1},
		entry{key(5), math.MinInt64},
	)
	got, gotMeta, n, err := decodeAll(b, fp, window, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{{key(0), now + 5}, {key(3), now + window}, {key(4), now + 1}}
	if !slices.Equal(got, want) || n != len(want) {
		t.Fatalf("got %v (n=%d), want %v", got, n, want)
	}
	if gotMeta != meta {
		t.Fatalf("meta %+v, want %+v", gotMeta, meta)
	}

	// now+window past the int64 range saturates instead of wrapping.
	b = encode(meta, entry{key(0), math.MaxInt64})
	if got, _, _, err = decodeAll(b, fp, math.MaxInt64, math.MaxInt64-1); err != nil || !slices.Equal(got, []entry{{key(0), math.MaxInt64}}) {
		t.Fatalf("saturating window: got %v, %v", got, err)
	}
	// No window, nothing live.
	for _, w := range []int64{0, -1, math.MinInt64} {
		for _, now := range []int64{now, -1, math.MinInt64} {
			if got, _, n, err = decodeAll(b, fp, w, now); err != nil || len(got) != 0 || n != 0 {
				t.Fatalf("window %d, now %d: got %v n=%d err=%v, want nothing", w, now, got, n, err)
			}
		}
	}
}

func TestAppendEncodeAppends(t *testing.T) {
	prefix := []byte("stored alongside")
	b := appendEncode(slices.Clone(prefix), Meta{Fingerprint: fp}, seq([]entry{{key(1), t0 + 1}}))
	if !bytes.HasPrefix(b, prefix) {
		t.Fatalf("prefix overwritten: %q", b[:len(prefix)])
	}
	if got, _, _, err := decodeAll(b[len(prefix):], fp, window, t0); err != nil || len(got) != 1 {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestTruncatedAtEveryOffset(t *testing.T) {
	b := small()
	for k := range len(b) {
		requireRefused(t, b[:k], ErrTruncated)
	}
}

func TestTrailingBytes(t *testing.T) {
	for _, extra := range []int{1, 23, 24, 25} {
		requireRefused(t, append(small(), make([]byte, extra)...), ErrCorrupt)
	}
}

func TestEveryBitFlip(t *testing.T) {
	b := small()
	count := binary.BigEndian.Uint64(b[countOffset:])
	for i := range b {
		for bit := range 8 {
			c := slices.Clone(b)
			c[i] ^= 1 << bit
			var want error
			switch {
			case i < 4:
				want = ErrForeign
			case i < 6:
				want = ErrVersion
			case i >= countOffset && i < headerLen && binary.BigEndian.Uint64(c[countOffset:]) > count:
				want = ErrTruncated
			default:
				// Every other flip, the fingerprint and a lower count
				// included, is caught by length or checksum.
				want = ErrCorrupt
			}
			t.Run(fmt.Sprintf("byte%d/bit%d", i, bit), func(t *testing.T) { requireRefused(t, c, want) })
		}
	}
}

func TestWrongFingerprint(t *testing.T) {
	_, _, _, err := decodeAll(small(), fp+1, window, t0)
	if !errors.Is(err, ErrForeign) {
		t.Fatalf("got %v, want ErrForeign", err)
	}
	for _, f := range []string{"0123456789abcdef", "0123456789abcdf0"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name fingerprint %s", err, f)
		}
	}
	c := localcache.New(16, window)
	if _, n, err := Restore(c, small(), fp+1, window, t0); !errors.Is(err, ErrForeign) || n != 0 || c.Len(t0) != 0 {
		t.Fatalf("Restore: n=%d err=%v held=%d", n, err, c.Len(t0))
	}
}

func TestUnknownVersion(t *testing.T) {
	for _, v := range []uint16{0, 2, math.MaxUint16} {
		b := small()
		binary.BigEndian.PutUint16(b[4:], v)
		requireRefused(t, b, ErrVersion)
		// Refused for its version even though its checksum is also wrong:
		// a later version may place or compute the checksum differently.
		_, _, _, err := decodeAll(b, fp, window, t0)
		if !strings.Contains(err.Error(), fmt.Sprintf("version %d", v)) {
			t.Errorf("error %q does not name version %d", err, v)
		}
	}
}

func TestEmptyAndGarbage(t *testing.T) {
	requireRefused(t, nil, ErrTruncated)
	requireRefused(t, []byte{}, ErrTruncated)
	requireRefused(t, []byte("OCD"), ErrTruncated)
	requireRefused(t, []byte("OCDD\x00\x01"), ErrTruncated)
	requireRefused(t, []byte("X"), ErrForeign)
	requireRefused(t, []byte(`{"json": true}`), ErrForeign)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 && len(b) >= 6 {
			copy(b, "OCDD\x00\x01") // get past the magic and version
		}
		requireRefused(t, b, nil)
	}
}

func TestHugeCountRefusedByLength(t *testing.T) {
	for _, count := range []uint64{1e12, math.MaxUint64, math.MaxUint64 / entryLen, 3} {
		b := make([]byte, 100) // room for 2 entries
		copy(b, "OCDD\x00\x01")
		binary.BigEndian.PutUint64(b[countOffset:], count)

		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		requireRefused(t, b, ErrTruncated)
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
			t.Fatalf("count %d: refusing allocated %d bytes", count, grew)
		}
	}
}

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus in testdata/fuzz/FuzzDecode")

// TestFuzzCorpusIsCurrent checks the checked-in seeds are exactly what the
// current layout produces, so a layout change cannot leave the fuzzer
// starting from stale inputs; -update-corpus rewrites them.
func TestFuzzCorpusIsCurrent(t *testing.T) {
	meta := Meta{Window: window, WrittenAt: t0, Fingerprint: fp}
	var mixed, descending []entry
	for i := range 6 { // two sorted runs, as from a two-shard cache
		mixed = append(mixed, entry{key(i), t0 + int64(i%3)*window/2})
	}
	for i := range 8 {
		descending = append(descending, entry{key(i), t0 + window - int64(i)})
	}
	valid := encode(meta, mixed...)
	future := slices.Clone(valid)
	binary.BigEndian.PutUint16(future[4:], 2)
	huge := slices.Clone(valid[:100])
	binary.BigEndian.PutUint64(huge[countOffset:], 1e12)
	type seed struct {
		b           []byte
		fingerprint uint64
		window, now int64
	}
	seeds := map[string]seed{
		"valid-empty":         {encode(meta), fp, window, t0},
		"valid-two-runs":      {valid, fp, window, t0 + window/4},
		"valid-descending":    {encode(meta, descending...), fp, window / 2, t0},
		"valid-saturating":    {encode(meta, entry{key(0), math.MaxInt64}, entry{key(1), math.MinInt64}), fp, math.MaxInt64, math.MaxInt64 - 1},
		"valid-duplicates":    {encode(meta, entry{key(7), t0 + 5}, entry{key(7), t0 + 3}), fp, window, t0},
		"foreign-fingerprint": {valid, fp ^ 1, window, t0},
		"future-version":      {future, fp, window, t0},
		"truncated":           {valid[:len(valid)-10], fp, window, t0},
		"huge-count":          {huge, fp, window, t0},
		"trailing":            {append(slices.Clone(valid), 0), fp, window, t0},
		"garbage":             {[]byte("\x00\xffnot a snapshot at all\n"), fp, window, t0},
		"empty":               {nil, 0, 0, 0},
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if *updateCorpus {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint64(%d)\nint64(%d)\nint64(%d)\n", s.b, s.fingerprint, s.window, s.now)
		path := filepath.Join(dir, name)
		if *updateCorpus {
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != body {
			t.Errorf("seed %s is stale or missing (%v): run go test -run TestFuzzCorpusIsCurrent -update-corpus", name, err)
		}
	}
}

// FuzzDecode: Decode never panics; when it fails it hands over nothing and
// its error wraps a sentinel; when it succeeds it returns exactly the stored
// entries that are live at now, clamped to now+window, in stored order, and
// these round-trip through appendEncode. Restore agrees with it.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, fingerprint uint64, window, now int64) {
		got, meta, n, err := decodeAll(b, fingerprint, window, now)
		c := localcache.New(max(1, min(len(got), maxOneShard)), 1)
		_, restored, rerr := Restore(c, b, fingerprint, window, now)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Decode error %v, Restore error %v", err, rerr)
		}
		if err != nil {
			if len(got) != 0 || n != 0 || meta != (Meta{}) || restored != 0 || c.Len(now) != 0 {
				t.Fatalf("failed with %q but handed over %d entries, n=%d, meta=%+v, restored %d", err, len(got), n, meta, restored)
			}
			if !slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }) {
				t.Fatalf("error %q wraps no sentinel", err)
			}
			return
		}

		// Exactly what the spec says, checked against the raw entries.
		if len(b) != encodedLen((len(b)-encodedLen(0))/entryLen) || meta.Fingerprint != fingerprint {
			t.Fatalf("accepted %d bytes with fingerprint %x", len(b), meta.Fingerprint)
		}
		limit := addSat(now, window)
		var want []entry
		stored := (len(b) - encodedLen(0)) / entryLen
		unchanged := true
		for i := range stored {
			e := b[headerLen+i*entryLen:]
			d := digest.Digest{Hi: binary.BigEndian.Uint64(e), Lo: binary.BigEndian.Uint64(e[8:])}
			raw := int64(binary.BigEndian.Uint64(e[16:]))
			if exp := min(raw, limit); exp > now {
				want = append(want, entry{d, exp})
				unchanged = unchanged && exp == raw
			} else {
				unchanged = false
			}
		}
		if !slices.Equal(got, want) || n != len(want) {
			t.Fatalf("got %v (n=%d), want %v", got, n, want)
		}

		// Round trip.
		b2 := appendEncode(nil, meta, seq(got))
		again, meta2, n2, err := decodeAll(b2, fingerprint, window, now)
		if err != nil || meta2 != meta || n2 != n || !slices.Equal(again, got) {
			t.Fatalf("round trip: %v %+v n=%d, want %v %+v n=%d (err %v)", again, meta2, n2, got, meta, n, err)
		}
		if unchanged && !bytes.Equal(b2, b) {
			t.Fatalf("nothing skipped or clamped, yet re-encoding differs:\n%x\n%x", b, b2)
		}

		// Restore holds each distinct digest once, in expiry order.
		distinct := map[digest.Digest]bool{}
		for _, e := range got {
			distinct[e.d] = true
		}
		if len(got) <= maxOneShard && (restored != len(distinct) || c.Len(now) != restored) {
			t.Fatalf("restored %d, held %d, want %d", restored, c.Len(now), len(distinct))
		}
		last := int64(math.MinInt64)
		c.Range(now, func(_ digest.Digest, exp int64) {
			if exp < last {
				t.Fatalf("restored out of expiry order: %d after %d", exp, last)
			}
			last = exp
		})
	})
}
