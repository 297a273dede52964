package localcache

import (
	"runtime"
	"testing"
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
