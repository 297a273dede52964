package localcache

import (
	"runtime"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// BenchmarkClaim measures a claim of a new key and of a held key in a cache
// of 10^6 entries.
func BenchmarkClaim(b *testing.B) {
	const size = 1 << 20
	c := New(size, 1<<62)
	for i := uint64(0); i < size; i++ {
		c.Claim(d(i), 1, 0)
	}
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Claim(d(uint64(size+i)), 2, 0)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
	b.Run("held", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Claim(d(uint64(size+i%size)), 3, 0)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
}

// BenchmarkMemoryPerKey reports the heap a full cache of 10^6 keys holds,
// per key: measured with the runtime's own accounting, not estimated.
func BenchmarkMemoryPerKey(b *testing.B) {
	const size = 1_000_000
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := New(size, 1<<62)
		for k := uint64(0); k < size; k++ {
			c.Claim(d(k), 1, 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/size, "bytes/key")
		runtime.KeepAlive(c)
	}
}

// BenchmarkClaimBatch claims batches of 1000 new keys (30% of them held
// already) in a full cache of 10^6 keys, one by one and as a batch.
func BenchmarkClaimBatch(b *testing.B) {
	const size, batch = 1 << 20, 1000
	for _, mode := range []string{"one-by-one", "batch"} {
		b.Run(mode, func(b *testing.B) {
			c := New(size, 1<<62)
			for i := uint64(0); i < size; i++ {
				c.Claim(d(i), 1, 0)
			}
			ds := make([]digest.Digest, batch)
			out := make([]Result, batch)
			next := uint64(size)
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for i := range ds {
					if i%10 < 3 {
						ds[i] = d(next - uint64(i) - 1)
					} else {
						ds[i] = d(next)
						next++
					}
				}
				if mode == "batch" {
					c.ClaimBatch(ds, uint64(n+2), 0, out)
					continue
				}
				for i, k := range ds {
					out[i], _ = c.Claim(k, uint64(n+2), 0)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/claim")
		})
	}
}
