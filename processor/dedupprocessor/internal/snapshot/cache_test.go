package snapshot

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/localcache"
)

// filled returns a cache of n keys, key i claimed at t0+i*step with step
// spreading the claims over span, and the time of the last claim.
func filled(n int, span int64) (c *localcache.Cache, step, last int64) {
	c = localcache.New(max(n, 1), window)
	if n == 0 {
		return c, 0, t0
	}
	step = span / int64(n)
	for i := range n {
		if r := claim(c, key(i), uint64(i+1), t0+int64(i)*step); r != localcache.Claimed {
			panic(fmt.Sprintf("key %d: %v", i, r))
		}
	}
	return c, step, t0 + int64(n-1)*step
}

// claim claims one digest.
func claim(c *localcache.Cache, d digest.Digest, token uint64, now int64) localcache.Result {
	var r [1]localcache.Result
	c.ClaimBatch([]digest.Digest{d}, token, now, r[:], nil)
	return r[0]
}

func held(c *localcache.Cache, now int64) map[digest.Digest]int64 {
	m := map[digest.Digest]int64{}
	c.Range(now, func(d digest.Digest, expires int64) { m[d] = expires })
	return m
}

func TestSaveRestoreRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 100_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src, step, saveAt := filled(n, 3*window/2)
			b := Save(src, Meta{Window: window, Fingerprint: fp}, saveAt)
			live := src.Len(saveAt)
			if len(b) != encodedLen(live) {
				t.Fatalf("%d bytes for %d live keys, want %d", len(b), live, encodedLen(live))
			}

			// Restart a quarter window later: keys that expired meanwhile
			// are dropped, every other one is held to its original expiry.
			restoreAt := saveAt + window/4
			want := map[digest.Digest]int64{}
			var gone []digest.Digest
			for i := range n {
				if exp := t0 + int64(i)*step + window; exp > restoreAt {
					want[key(i)] = exp
				} else {
					gone = append(gone, key(i))
				}
			}
			dst := localcache.New(max(n, 1), window)
			meta, restored, err := Restore(dst, b, fp, window, restoreAt)
			if err != nil {
				t.Fatal(err)
			}
			if meta != (Meta{Window: window, WrittenAt: saveAt, Fingerprint: fp}) {
				t.Fatalf("meta %+v", meta)
			}
			if restored != len(want) || dst.Len(restoreAt) != len(want) {
				t.Fatalf("restored %d, held %d, want %d", restored, dst.Len(restoreAt), len(want))
			}
			if got := held(dst, restoreAt); !maps.Equal(got, want) {
				t.Fatalf("held %d keys, want %d, or expiries differ", len(got), len(want))
			}
			if src.Evictions() != 0 || dst.Evictions() != 0 {
				t.Fatalf("evictions: src %d, dst %d", src.Evictions(), dst.Evictions())
			}
			for d := range want {
				if r := claim(dst, d, 1, restoreAt); r != localcache.Held {
					t.Fatalf("restored key %v: %v, want Held", d, r)
				}
			}
			for _, d := range gone {
				if r := claim(dst, d, 1, restoreAt); r != localcache.Claimed {
					t.Fatalf("expired key %v: %v, want Claimed", d, r)
				}
			}
			if n == 100_000 && (len(want) == 0 || len(gone) == 0) {
				t.Fatalf("test covers nothing: %d held, %d gone", len(want), len(gone))
			}
		})
	}
}

// A snapshot from a sharded cache is sorted only within each shard; a
// smaller cache restored from it must keep the keys that expire last.
func TestRestoreIntoSmallerCacheKeepsLatest(t *testing.T) {
	const n, small = 100_000, 10_000
	src, step, saveAt := filled(n, 3*window/2)
	b := Save(src, Meta{Window: window, Fingerprint: fp}, saveAt)

	want := map[digest.Digest]int64{}
	for i := n - small; i < n; i++ {
		want[key(i)] = t0 + int64(i)*step + window
	}
	dst := localcache.New(small, window)
	_, restored, err := Restore(dst, b, fp, window, saveAt)
	if err != nil {
		t.Fatal(err)
	}
	if restored != src.Len(saveAt) {
		t.Fatalf("restored %d, want %d (all live keys, then evicted)", restored, src.Len(saveAt))
	}
	if got := held(dst, saveAt); !maps.Equal(got, want) {
		t.Fatalf("held %d keys, want the %d latest", len(got), len(want))
	}
}

func TestRestoreSortsByExpiry(t *testing.T) {
	var es []entry // descending: each entry its own run
	for i := range 20 {
		es = append(es, entry{key(i), t0 + 100 - int64(i)})
	}
	dst := localcache.New(10, window)
	if _, _, err := Restore(dst, encode(Meta{Fingerprint: fp}, es...), fp, window, t0); err != nil {
		t.Fatal(err)
	}
	var got []int64
	dst.Range(t0, func(_ digest.Digest, exp int64) { got = append(got, exp) })
	want := []int64{t0 + 91, t0 + 92, t0 + 93, t0 + 94, t0 + 95, t0 + 96, t0 + 97, t0 + 98, t0 + 99, t0 + 100}
	if !slices.Equal(got, want) {
		t.Fatalf("held expiries %v, want %v", got, want)
	}
	// Once the earliest has expired, the ring frees it at the head.
	if n := dst.Len(t0 + 95); n != 5 {
		t.Fatalf("held %d at t0+95, want 5", n)
	}
}

// inExpiryOrder is a stable sort by expiry, whatever the runs look like.
func TestInExpiryOrderIsStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		es := make([]entry, rng.IntN(200))
		for i := range es {
			es[i] = entry{key(i), int64(rng.IntN(8))} // few values: many ties and runs
		}
		entries := encode(Meta{}, es...)[headerLen:]
		entries = entries[:len(entries)-checksumLen]
		want := make([]int, len(es))
		for i := range want {
			want[i] = i
		}
		slices.SortStableFunc(want, func(a, b int) int { return cmp.Compare(es[a].expires, es[b].expires) })
		var got []int
		inExpiryOrder(entries, func(i int) { got = append(got, i) })
		if !slices.Equal(got, want) {
			t.Fatalf("expiries %v: order %v, want %v", es, got, want)
		}
	}
}

func TestRestoreClampsToRestoringWindow(t *testing.T) {
	long := 6 * window
	src := localcache.New(10, long)
	claim(src, key(1), 1, t0)
	b := Save(src, Meta{Window: long, Fingerprint: fp}, t0)
	dst := localcache.New(10, window)
	if _, n, err := Restore(dst, b, fp, window, t0+1); err != nil || n != 1 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if got := held(dst, t0+1); got[key(1)] != t0+1+window {
		t.Fatalf("expiry %d, want now+window %d", got[key(1)], t0+1+window)
	}
}

func TestRestoreSkipsKeysAlreadyHeld(t *testing.T) {
	b := encode(Meta{Fingerprint: fp}, entry{key(1), t0 + 10}, entry{key(2), t0 + 20}, entry{key(2), t0 + 30})
	dst := localcache.New(10, window)
	claim(dst, key(1), 9, t0)
	if _, n, err := Restore(dst, b, fp, window, t0); err != nil || n != 1 || dst.Len(t0) != 2 {
		t.Fatalf("restored %d (err %v), held %d; want 1 restored, 2 held", n, err, dst.Len(t0))
	}
	if got := held(dst, t0); got[key(1)] != t0+window || got[key(2)] != t0+20 {
		t.Fatalf("held %v: the claim must keep its own expiry, the first copy of key 2 wins", got)
	}
}

func TestSaveStampsWrittenAt(t *testing.T) {
	c := localcache.New(10, window)
	b := Save(c, Meta{Window: window, WrittenAt: 42, Fingerprint: fp}, t0)
	if _, meta, _, err := decodeAll(b, fp, window, t0); err != nil || meta.WrittenAt != t0 {
		t.Fatalf("meta %+v, err %v", meta, err)
	}
	if _, _, _, err := decodeAll(b, 0, window, t0); !errors.Is(err, ErrForeign) {
		t.Fatalf("fingerprint not saved: %v", err)
	}
}

const benchEntries = 1_000_000

func BenchmarkSave(b *testing.B) {
	c, _, now := filled(benchEntries, window/2)
	live := c.Len(now)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = Save(c, Meta{Window: window, Fingerprint: fp}, now)
	}
	b.ReportMetric(float64(len(buf))/float64(live), "bytes/entry")
	b.ReportMetric(float64(live)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func BenchmarkRestore(b *testing.B) {
	src, _, now := filled(benchEntries, window/2)
	snap := Save(src, Meta{Window: window, Fingerprint: fp}, now)
	live := src.Len(now)
	src = nil
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		dst := localcache.New(benchEntries, window)
		b.StartTimer()
		if _, n, err := Restore(dst, snap, fp, window, now); err != nil || n != live {
			b.Fatalf("restored %d of %d: %v", n, live, err)
		}
	}
	b.ReportMetric(float64(len(snap))/float64(live), "bytes/entry")
	b.ReportMetric(float64(live)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkDecode is the format's share of Restore: checks and reads only.
func BenchmarkDecode(b *testing.B) {
	src, _, now := filled(benchEntries, window/2)
	snap := Save(src, Meta{Window: window, Fingerprint: fp}, now)
	live := src.Len(now)
	src = nil
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := decode(snap, fp, window, now, func(digest.Digest, int64) {}); err != nil || n != live {
			b.Fatalf("decoded %d of %d: %v", n, live, err)
		}
	}
	b.ReportMetric(float64(live)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func TestSaveSkipsPendingKeys(t *testing.T) {
	c := localcache.New(10, window)
	c.Begin(7)
	claim(c, key(1), 7, t0) // a batch in flight
	c.Begin(8)
	claim(c, key(2), 8, t0) // a delivered batch
	c.End(8)
	c.Insert(key(3), t0+window, t0)
	b := Save(c, Meta{Window: window, Fingerprint: fp}, t0)
	dst := localcache.New(10, window)
	if _, n, err := Restore(dst, b, fp, window, t0); err != nil || n != 2 {
		t.Fatalf("restored %d, %v; want 2 keys", n, err)
	}
	for k, want := range map[int]localcache.Result{1: localcache.Claimed, 2: localcache.Held, 3: localcache.Held} {
		if got := claim(dst, key(k), 99, t0+1); got != want {
			t.Errorf("key %d: %v, want %v", k, got, want)
		}
	}
}
